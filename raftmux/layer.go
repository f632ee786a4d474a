package raftmux

import (
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// layer is one group's raft.StreamLayer: Dial prefixes the group header,
// Accept yields the connections the Mux routed to this group.
type layer struct {
	mux    *Mux
	group  string
	header []byte

	// ch is unbuffered on purpose: a connection is handed over only to a
	// running Accept, so none can be stranded in a buffer when the layer
	// closes.
	ch        chan net.Conn
	done      chan struct{}
	closeOnce sync.Once

	// accepted holds the connections Accept handed to raft. raft's
	// NetworkTransport.Close stops its listener but not the handlers of
	// established connections: each keeps reading commands and races its
	// shutdown channel against the consumer channel. Closing them here
	// makes a closed group refuse every RPC, not a random share of them.
	mu       sync.Mutex
	accepted map[*trackedConn]struct{}
	closed   bool
}

// trackedConn removes itself from its layer's set when raft closes it.
type trackedConn struct {
	net.Conn
	l    *layer
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.accepted, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

var _ raft.StreamLayer = (*layer)(nil)

func (l *layer) deliver(conn net.Conn, muxDone <-chan struct{}) {
	select {
	case l.ch <- conn:
	case <-l.done:
		_ = conn.Close()
	case <-muxDone:
		_ = conn.Close()
	}
}

// Accept returns the next connection routed to this group.
func (l *layer) Accept() (net.Conn, error) {
	select {
	case <-l.done:
		return nil, fmt.Errorf("raftmux: group %q: %w", l.group, ErrClosed)
	case c := <-l.ch:
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.closed {
			_ = c.Close()
			return nil, fmt.Errorf("raftmux: group %q: %w", l.group, ErrClosed)
		}
		tc := &trackedConn{Conn: &isoConn{Conn: c, mux: l.mux}, l: l}
		l.accepted[tc] = struct{}{}
		return tc, nil
	}
}

// Close unregisters the group; other groups on the Mux are unaffected.
func (l *layer) Close() error {
	l.closeOnce.Do(func() {
		l.mux.unregister(l)
		close(l.done)
		l.mu.Lock()
		l.closed = true
		conns := l.accepted
		l.accepted = nil
		l.mu.Unlock()
		for c := range conns {
			_ = c.Conn.Close()
		}
	})
	return nil
}

// Addr is the Mux's advertised address: it is what raft hands to peers.
func (l *layer) Addr() net.Addr { return advertisedAddr(l.mux.advertise) }

// Dial connects to a peer's Mux and writes this group's header. The
// connection closes itself when idle and dials again when next written
// (redialConn, limits.go).
func (l *layer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	conn, err := l.dial(address, timeout)
	if err != nil {
		return nil, err
	}
	if l.mux.dialIdle > 0 {
		conn = newRedialConn(l.mux, conn, l.mux.dialIdle, func(timeout time.Duration) (net.Conn, error) {
			return l.dial(address, timeout)
		})
	}
	return &isoConn{Conn: conn, mux: l.mux}, nil
}

// dial connects to a peer's Mux and writes this group's header.
func (l *layer) dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	if l.mux.isolated.Load() {
		return nil, fmt.Errorf("raftmux: dial %s for %q: %w", address, l.group, ErrIsolated)
	}
	d := net.Dialer{Timeout: timeout}
	conn, err := d.Dial("tcp", string(address))
	if err != nil {
		return nil, fmt.Errorf("raftmux: dial %s for %q: %w", address, l.group, err)
	}
	if timeout > 0 {
		_ = conn.SetDeadline(time.Now().Add(timeout))
	}
	if l.mux.tls != nil {
		tc := tls.Client(conn, l.mux.tls.Dial(""))
		if err := tc.Handshake(); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("raftmux: tls to %s for %q: %w", address, l.group, err)
		}
		conn = tc
	}
	if _, err := conn.Write(l.header); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("raftmux: write header to %s for %q: %w", address, l.group, err)
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, nil
}

// isoConn fails every read and write once its mux is isolated, so raft
// connections already open (pooled outbound ones included) stop carrying
// anything the moment SetIsolated(true) returns.
type isoConn struct {
	net.Conn
	mux *Mux
}

func (c *isoConn) Read(b []byte) (int, error) {
	if c.mux.isolated.Load() {
		_ = c.Conn.Close()
		return 0, ErrIsolated
	}
	return c.Conn.Read(b)
}

func (c *isoConn) Write(b []byte) (int, error) {
	if c.mux.isolated.Load() {
		_ = c.Conn.Close()
		return 0, ErrIsolated
	}
	return c.Conn.Write(b)
}

type advertisedAddr string

func (a advertisedAddr) Network() string { return "tcp" }
func (a advertisedAddr) String() string  { return string(a) }
