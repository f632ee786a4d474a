package raftmux

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// Connection limits. Every inbound raft connection costs the accepting
// node a goroutine and the 256 KiB read buffer hashicorp/raft's
// NetworkTransport gives each one it serves (connReceiveBufferSize in
// net_transport.go), so the Mux caps how many it holds (MaxConns) and
// closes those that have been idle for long (IdleTimeout).
//
// Closing an idle connection from the accepting side alone would fail
// raft RPCs. NetworkTransport keeps up to MaxPool idle connections per
// peer and group, takes the newest first and never checks one before
// use: an RPC sent on a pooled connection its peer has closed fails (the
// write succeeds, the read sees EOF), the connection is dropped, and only
// a later RPC dials (net_transport.go: getConn, genericRPC,
// decodeResponse). For an AppendEntries or a heartbeat that is a retry
// after raft's backoff and an ERROR line; for a vote it is a lost election
// round. And connections do sit idle with a live peer: the older ones at
// the bottom of a pool, a quiet group's own heartbeat connection (its
// heartbeats travel coalesced, beats.go), a follower's connections to the
// other voters, untouched since the last election. So the dialing side
// closes its own connections first (DialIdle, below any IdleTimeout
// raftq-node accepts), at a moment with nothing in flight, and dials again
// on the next write, unseen by raft (redialConn). The accepting side's
// IdleTimeout then only closes the connections of peers that do not do
// that, or that vanished without closing theirs.
const (
	// DefaultMaxConns is the default cap on a node's inbound raft
	// connections (docs/listeners.md, "Connection and stream limits"):
	// 256 groups shared with two peers each, at five connections per
	// group and peer (raft's pool of three, an AppendEntries pipeline, a
	// snapshot), is 2,560, plus one coalesced-heartbeat connection per
	// peer node.
	DefaultMaxConns = 4096
	// DefaultIdleTimeout is the default for closing an inbound raft
	// connection that carried nothing: far above any heartbeat interval.
	DefaultIdleTimeout = 5 * time.Minute
	// DialIdle is how long a connection this node dialled may carry
	// nothing, with no RPC in flight, before this node closes it; raft's
	// next RPC on it dials again.
	DialIdle = time.Minute
	// MinIdleTimeout is the shortest IdleTimeout raftq-node takes: twice
	// DialIdle, so an idle connection is closed by the node that dialled
	// it, between RPCs, before its peer would.
	MinIdleTimeout = 2 * DialIdle
	// redialTimeout bounds a redial when raft set no write deadline (it
	// always sets one: the transport's 10 s timeout).
	redialTimeout = 10 * time.Second
	// refusalLogEvery spaces the warnings about refused connections.
	refusalLogEvery = 10 * time.Second
)

// ConnStats counts a Mux's inbound raft connections.
type ConnStats struct {
	// Open is the inbound connections open now, those still sending
	// their header included.
	Open int
	// Max is the cap on Open; 0: none.
	Max int
	// Refused counts connections closed at once because Open was at Max.
	Refused uint64
	// IdleClosed counts connections closed after IdleTimeout without a
	// byte.
	IdleClosed uint64
}

// ConnStats reports the inbound connections.
func (m *Mux) ConnStats() ConnStats {
	return ConnStats{Open: int(m.open.Load()), Max: m.maxConns, Refused: m.refused.Load(), IdleClosed: m.idleClosed.Load()}
}

// admit counts an accepted connection in, or refuses it at the cap. Only
// the accept loop admits, so the count cannot overshoot.
func (m *Mux) admit(conn net.Conn) (net.Conn, bool) {
	n := m.open.Add(1)
	if m.maxConns > 0 && n > int64(m.maxConns) {
		m.open.Add(-1)
		m.refused.Add(1)
		if ok, skipped := m.refusalLog.Allow(time.Now()); ok {
			m.logger.Warn("raft connection refused: this node holds as many inbound raft connections as --max-raft-conns allows",
				"remote", conn.RemoteAddr().String(), "limit", m.maxConns, "refused_unlogged", skipped)
		}
		_ = conn.Close()
		return nil, false
	}
	return &countedConn{Conn: conn, m: m}, true
}

// countedConn leaves the count of open connections when closed.
type countedConn struct {
	net.Conn
	m    *Mux
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.m.open.Add(-1) })
	return c.Conn.Close()
}

// idleConn closes an inbound connection whose reader has waited
// IdleTimeout for a byte. Each Read sets its own deadline: raft's handler
// reads only between requests, so a request being served (a snapshot
// restored for minutes) is never taken for idleness, and nothing else
// sets read deadlines on an accepted connection.
type idleConn struct {
	net.Conn
	m *Mux
}

func (c *idleConn) Read(b []byte) (int, error) {
	_ = c.Conn.SetReadDeadline(time.Now().Add(c.m.idle))
	n, err := c.Conn.Read(b)
	var ne net.Error
	if n == 0 && errors.As(err, &ne) && ne.Timeout() {
		c.m.idleClosed.Add(1)
		c.m.logger.Debug("closed an idle inbound raft connection", "remote", c.RemoteAddr().String(), "idle", c.m.idle)
		_ = c.Conn.Close()
		// EOF: raft's handler and the heartbeat server end quietly on it,
		// as when the peer closes.
		return 0, io.EOF
	}
	return n, err
}

// errIdleRead is a Read on an outbound connection closed for idleness
// before anything was written on it again; raft reads only answers to
// what it wrote, so it never sees this.
var errIdleRead = errors.New("raftmux: read on a connection closed while idle")

// redialConn is a raft connection this node dialled. It closes itself
// after DialIdle with nothing in flight and dials again on the next Write,
// so raft's pool never hands out a connection the peer closed for
// idleness (see the comment on the limits above).
type redialConn struct {
	dial  func(timeout time.Duration) (net.Conn, error)
	idle  time.Duration
	m     *Mux
	timer *time.Timer

	mu     sync.Mutex
	conn   net.Conn // nil while closed for idleness
	closed bool     // by its owner: for good
	laddr  net.Addr
	raddr  net.Addr
	busy   int       // Reads and Writes in progress
	last   time.Time // end of the last Read or Write, or the dial
	// answered: the last operation to end was a Read (or the dial). A
	// connection whose last operation was a Write is inside a request
	// (an InstallSnapshot reading its snapshot from disk between writes)
	// and must not be cut over to a new connection.
	answered bool
	// rd and wd are the deadlines raft set, carried over to a new
	// connection.
	rd, wd time.Time
}

func newRedialConn(m *Mux, conn net.Conn, idle time.Duration, dial func(time.Duration) (net.Conn, error)) *redialConn {
	c := &redialConn{dial: dial, idle: idle, m: m, conn: conn, laddr: conn.LocalAddr(), raddr: conn.RemoteAddr(),
		last: time.Now(), answered: true}
	c.timer = time.AfterFunc(idle, c.checkIdle)
	return c
}

// checkIdle closes the connection if it is idle, else looks again when it
// could be.
func (c *redialConn) checkIdle() {
	c.mu.Lock()
	if c.closed || c.conn == nil {
		c.mu.Unlock()
		return
	}
	wait := c.idle - time.Since(c.last)
	if c.busy == 0 && c.answered && wait <= 0 {
		conn := c.conn
		c.conn = nil
		c.mu.Unlock()
		// Outside the lock: closing TLS writes its close_notify.
		_ = conn.Close()
		c.m.dialIdleClosed.Add(1)
		return
	}
	if wait <= 0 {
		wait = c.idle
	}
	c.timer.Reset(wait)
	c.mu.Unlock()
}

// acquire returns the connection for one Read or Write, dialling again
// for a Write after an idle close.
func (c *redialConn) acquire(write bool) (net.Conn, error) {
	c.mu.Lock()
	for {
		switch {
		case c.closed:
			c.mu.Unlock()
			return nil, net.ErrClosed
		case c.conn != nil:
			c.busy++
			conn := c.conn
			c.mu.Unlock()
			return conn, nil
		case !write:
			c.mu.Unlock()
			return nil, errIdleRead
		}
		timeout := redialTimeout
		if !c.wd.IsZero() {
			if timeout = time.Until(c.wd); timeout <= 0 {
				c.mu.Unlock()
				return nil, fmt.Errorf("raftmux: redial after an idle close: %w", os.ErrDeadlineExceeded)
			}
		}
		// Dialled outside the lock, so Close never waits for a dial.
		c.mu.Unlock()
		nc, err := c.dial(timeout)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		switch {
		case c.closed:
			c.mu.Unlock()
			_ = nc.Close()
			return nil, net.ErrClosed
		case c.conn != nil:
			_ = nc.Close() // another writer dialled first (raft never writes concurrently)
			continue
		}
		c.conn, c.laddr, c.raddr = nc, nc.LocalAddr(), nc.RemoteAddr()
		c.last, c.answered = time.Now(), true
		if !c.rd.IsZero() {
			_ = nc.SetReadDeadline(c.rd)
		}
		if !c.wd.IsZero() {
			_ = nc.SetWriteDeadline(c.wd)
		}
		c.m.redials.Add(1)
		c.timer.Reset(c.idle)
	}
}

func (c *redialConn) release(read bool) {
	c.mu.Lock()
	c.busy--
	c.last, c.answered = time.Now(), read
	c.mu.Unlock()
}

func (c *redialConn) Read(b []byte) (int, error) {
	conn, err := c.acquire(false)
	if err != nil {
		return 0, err
	}
	n, err := conn.Read(b)
	c.release(true)
	return n, err
}

func (c *redialConn) Write(b []byte) (int, error) {
	conn, err := c.acquire(true)
	if err != nil {
		return 0, err
	}
	n, err := conn.Write(b)
	c.release(false)
	return n, err
}

func (c *redialConn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	conn := c.conn
	c.conn = nil
	c.timer.Stop()
	c.mu.Unlock()
	if conn == nil {
		return nil
	}
	return conn.Close()
}

func (c *redialConn) LocalAddr() net.Addr {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.laddr
}

func (c *redialConn) RemoteAddr() net.Addr {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.raddr
}

func (c *redialConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rd, c.wd = t, t
	if c.conn == nil {
		return nil
	}
	return c.conn.SetDeadline(t)
}

func (c *redialConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rd = t
	if c.conn == nil {
		return nil
	}
	return c.conn.SetReadDeadline(t)
}

func (c *redialConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wd = t
	if c.conn == nil {
		return nil
	}
	return c.conn.SetWriteDeadline(t)
}
