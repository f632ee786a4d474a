// Package raftmux carries the raft traffic of every raft group on a node over
// one TCP port. Each outgoing raft connection starts with a short header that
// names its group; the accepting side reads it and hands the connection to
// that group's raft.StreamLayer. Docker and firewalls see one fixed raft port
// however many groups a node hosts.
package raftmux

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/internal/ratelog"
)

// headerTimeout bounds how long an accepted connection may take to send its
// header, so a silent or hostile peer cannot pin a goroutine.
const headerTimeout = 5 * time.Second

// ErrClosed is returned by Accept on a closed layer and by Transport on a
// closed Mux.
var ErrClosed = errors.New("raftmux: closed")

// Mux owns the node's raft listener and routes accepted connections to the
// registered groups.
type Mux struct {
	ln        net.Listener
	advertise string
	logger    *slog.Logger

	mu     sync.Mutex
	groups map[string]*layer
	// pending holds connections still sending their header, so Close can
	// cut them off instead of waiting out headerTimeout.
	pending map[net.Conn]struct{}
	closed  bool
	// isolated: every raft connection in or out is refused (SetIsolated).
	isolated atomic.Bool
	tls      *TLS // nil: plaintext
	done     chan struct{}
	wg       sync.WaitGroup
	beats    *beatHub // coalesced heartbeats of quiet groups (beats.go)

	// Connection limits (limits.go).
	maxConns   int           // inbound connections open at once; 0: no cap
	idle       time.Duration // close inbound connections idle this long; 0: never
	dialIdle   time.Duration // close outbound connections idle this long; 0: never
	open       atomic.Int64  // inbound connections open
	refused    atomic.Uint64 // inbound connections refused at maxConns
	idleClosed atomic.Uint64 // inbound connections closed for idleness
	refusalLog *ratelog.Limiter
	// Outbound connections closed for idleness, and dialled again.
	dialIdleClosed, redials atomic.Uint64
}

// Options configures a Mux beyond its addresses.
type Options struct {
	// TLS, if set, makes every connection in and out mutual TLS.
	TLS *TLS
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// MaxConns caps the inbound connections open at once, those still
	// sending their header included; one past it is closed as soon as it
	// is accepted, and logged. 0: DefaultMaxConns; negative: no cap.
	MaxConns int
	// IdleTimeout closes an inbound connection that carried no byte for
	// this long while its reader waited. 0: DefaultIdleTimeout; negative:
	// never. raftq-node takes at least MinIdleTimeout (limits.go).
	IdleTimeout time.Duration
	// dialIdle overrides DialIdle, for tests; negative: never.
	dialIdle time.Duration
}

// TLS secures the raft port: every connection, in or out, is mutual TLS
// between cluster members.
type TLS struct {
	// Server is the configuration of accepted connections; it must require
	// and verify a member's certificate.
	Server *tls.Config
	// Dial returns the configuration of an outgoing connection; expect is
	// the node id the far end must prove, "" for any member.
	Dial func(expect string) *tls.Config
}

// Listen binds bindAddr and starts accepting plaintext connections.
// advertiseAddr is the address peers dial (it is what raft stores in its
// configuration); empty means the bound address, which is only right when
// bindAddr is a concrete host.
func Listen(bindAddr, advertiseAddr string, logger *slog.Logger) (*Mux, error) {
	return ListenTLS(bindAddr, advertiseAddr, nil, logger)
}

// ListenTLS is Listen with every connection under sec; nil sec is
// plaintext.
func ListenTLS(bindAddr, advertiseAddr string, sec *TLS, logger *slog.Logger) (*Mux, error) {
	return ListenWith(bindAddr, advertiseAddr, Options{TLS: sec, Logger: logger})
}

// ListenWith is Listen with opts.
func ListenWith(bindAddr, advertiseAddr string, opts Options) (*Mux, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	maxConns := cmp.Or(opts.MaxConns, DefaultMaxConns)
	idle := cmp.Or(opts.IdleTimeout, DefaultIdleTimeout)
	dialIdle := cmp.Or(opts.dialIdle, DialIdle)
	ln, err := net.Listen("tcp", bindAddr)
	if err != nil {
		return nil, fmt.Errorf("raftmux: listen %s: %w", bindAddr, err)
	}
	if advertiseAddr == "" {
		advertiseAddr = ln.Addr().String()
	}
	if _, _, err := net.SplitHostPort(advertiseAddr); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("raftmux: advertise address %q: %w", advertiseAddr, err)
	}
	m := &Mux{
		ln:         ln,
		advertise:  advertiseAddr,
		tls:        opts.TLS,
		logger:     logger.With("component", "raftmux"),
		groups:     make(map[string]*layer),
		pending:    make(map[net.Conn]struct{}),
		done:       make(chan struct{}),
		maxConns:   max(maxConns, 0),
		idle:       max(idle, 0),
		dialIdle:   max(dialIdle, 0),
		refusalLog: ratelog.New(refusalLogEvery),
	}
	m.beats, err = newBeatHub(m, BeatWindow)
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	m.wg.Add(1)
	go m.acceptLoop()
	return m, nil
}

// Addr is the advertised address of the listener.
func (m *Mux) Addr() string { return m.advertise }

// BindAddr is the address actually bound (useful with port 0 in tests).
func (m *Mux) BindAddr() net.Addr { return m.ln.Addr() }

// Close stops the listener and closes every group's layer. Transports built
// on those layers see Accept fail and stop serving.
func (m *Mux) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	close(m.done)
	layers := make([]*layer, 0, len(m.groups))
	for _, l := range m.groups {
		layers = append(layers, l)
	}
	for c := range m.pending {
		_ = c.Close()
	}
	m.mu.Unlock()

	m.beats.close()
	err := m.ln.Close()
	for _, l := range layers {
		_ = l.Close()
	}
	m.wg.Wait()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("raftmux: close listener: %w", err)
	}
	return nil
}

func (m *Mux) acceptLoop() {
	defer m.wg.Done()
	var backoff time.Duration
	for {
		conn, err := m.ln.Accept()
		if err != nil {
			select {
			case <-m.done:
				return
			default:
			}
			// Temporary failures (EMFILE...) must not kill the port: back off.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			m.logger.Warn("raft accept failed", "err", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
			case <-m.done:
				return
			}
			continue
		}
		backoff = 0
		conn, ok := m.admit(conn)
		if !ok {
			continue
		}
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			_ = conn.Close()
			return
		}
		m.pending[conn] = struct{}{}
		m.wg.Add(1)
		m.mu.Unlock()
		go m.handshake(conn)
	}
}

// handshake reads the header and delivers conn to its group, or closes it.
func (m *Mux) handshake(conn net.Conn) {
	defer m.wg.Done()
	raw := conn
	_ = conn.SetDeadline(time.Now().Add(headerTimeout))
	var err error
	if m.tls != nil {
		// The handshake runs under the header deadline: a peer that never
		// finishes it is cut off like one that never sends its header.
		tc := tls.Server(conn, m.tls.Server)
		if err = tc.Handshake(); err != nil {
			err = fmt.Errorf("tls: %w", err)
		}
		conn = tc
	}
	var group string
	if err == nil {
		group, err = readHeader(conn)
	}
	m.mu.Lock()
	delete(m.pending, raw)
	m.mu.Unlock()
	if err != nil {
		m.logger.Warn("raft connection rejected", "remote", conn.RemoteAddr().String(), "err", err)
		_ = conn.Close()
		return
	}
	_ = conn.SetDeadline(time.Time{})
	if m.idle > 0 {
		conn = &idleConn{Conn: conn, m: m}
	}
	if m.isolated.Load() {
		_ = conn.Close()
		return
	}
	m.mu.Lock()
	l := m.groups[group]
	m.mu.Unlock()
	if l == nil {
		// Normal while a node is starting (the group is not open yet) or
		// after a shard moved away; raft on the dialing side retries.
		m.logger.Debug("raft connection for unknown group", "group", group, "remote", conn.RemoteAddr().String())
		_ = conn.Close()
		return
	}
	l.deliver(conn, m.done)
}

// proveGroup is the header group of an identity probe: no group has the
// name, so the far end closes the connection after the handshake.
const proveGroup = "-prove-identity"

// Prove dials addr and checks that the far end holds the certificate of
// node id: a raft address learnt from gossip is put into a raft
// configuration only once it proved so. Without TLS there is nothing to
// prove and it returns nil.
func (m *Mux) Prove(ctx context.Context, addr, id string) error {
	if m.tls == nil {
		return nil
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("raftmux: prove %s at %s: %w", id, addr, err)
	}
	defer conn.Close()
	tc := tls.Client(conn, m.tls.Dial(id))
	if err := tc.HandshakeContext(ctx); err != nil {
		return fmt.Errorf("raftmux: prove %s at %s: %w", id, addr, err)
	}
	hdr, err := encodeHeader(proveGroup)
	if err != nil {
		return err
	}
	_, _ = tc.Write(hdr)
	return nil
}

// ErrIsolated is what a raft dial fails with while the node is isolated.
var ErrIsolated = errors.New("raftmux: this node takes no part in raft yet")

// SetIsolated cuts (or restores) every raft group of the node off from its
// peers: connections in and out are refused, and open ones fail at their
// next read or write. A node whose identity is not
// settled yet (it may have lost its state) is isolated so that none of its
// replicas votes or acknowledges anything.
func (m *Mux) SetIsolated(on bool) {
	m.isolated.Store(on)
}

// Isolated reports whether SetIsolated(true) is in force.
func (m *Mux) Isolated() bool { return m.isolated.Load() }

// TransportOptions tunes the raft.NetworkTransport of one group.
type TransportOptions struct {
	// MaxPool is the number of idle outbound connections kept per peer
	// (default 3).
	MaxPool int
	// Timeout bounds raft RPC I/O (default 10 s). InstallSnapshot scales it
	// with the snapshot size on its own.
	Timeout time.Duration
	// MaxRPCsInFlight is raft's AppendEntries pipeline depth; 0 keeps raft's
	// default (2). 1 disables pipelining: one AppendEntries in flight per
	// follower.
	MaxRPCsInFlight int
	// Logger receives raft transport logs at warn level or above; nil means
	// the Mux's logger.
	Logger *slog.Logger
	// Gate, if set, lets the group's owner hold back this replica's raft
	// traffic (GatedTransport); nil holds nothing.
	Gate *Gate
}

// Transport registers group and returns a raft transport whose connections
// all travel through this Mux. Closing the transport unregisters the group;
// a group id may be registered again after that.
func (m *Mux) Transport(group string, opts TransportOptions) (raft.Transport, error) {
	l, err := m.Layer(group)
	if err != nil {
		return nil, err
	}
	if opts.MaxPool <= 0 {
		opts.MaxPool = 3
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	logger := opts.Logger
	if logger == nil {
		logger = m.logger
	}
	tr := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:          l,
		MaxPool:         opts.MaxPool,
		MaxRPCsInFlight: opts.MaxRPCsInFlight,
		Timeout:         opts.Timeout,
		Logger:          HCLogger(logger.With("group", group), "raft-net"),
	})
	g := opts.Gate
	if g == nil {
		g = &Gate{}
	}
	return newGatedTransport(tr, g, m.beats, group), nil
}

// Layer registers group and returns its raw raft.StreamLayer, for callers
// that build their own transport.
func (m *Mux) Layer(group string) (raft.StreamLayer, error) {
	if err := validGroup(group); err != nil {
		return nil, err
	}
	hdr, err := encodeHeader(group)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	if _, ok := m.groups[group]; ok {
		return nil, fmt.Errorf("raftmux: group %q already registered", group)
	}
	l := &layer{
		mux:      m,
		group:    group,
		header:   hdr,
		ch:       make(chan net.Conn),
		done:     make(chan struct{}),
		accepted: make(map[*trackedConn]struct{}),
	}
	m.groups[group] = l
	return l, nil
}

func (m *Mux) unregister(l *layer) {
	m.mu.Lock()
	if m.groups[l.group] == l {
		delete(m.groups, l.group)
	}
	m.mu.Unlock()
}
