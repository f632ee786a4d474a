package raftmux

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/tlsconf"
)

// The bounds below are generous on purpose: these tests run with -race on
// a loaded 2-core machine, and wait on events, not on sleeps.
const settle = 10 * time.Second

// logBuffer collects a logger's lines for assertions.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func listenWith(t *testing.T, opts Options) *Mux {
	t.Helper()
	m, err := ListenWith("127.0.0.1:0", "", opts)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// acceptAll hands every connection group's layer accepts to the channel.
func acceptAll(t *testing.T, m *Mux, group string) <-chan net.Conn {
	t.Helper()
	l, err := m.Layer(group)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ch := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			ch <- c
		}
	}()
	return ch
}

// dialGroup opens a raw connection to m and sends group's header.
func dialGroup(t *testing.T, m *Mux, group string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", m.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	hdr, err := encodeHeader(group)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Write(hdr) // a refused connection may already be closed
	return c
}

func waitAccepted(t *testing.T, ch <-chan net.Conn, what string) net.Conn {
	t.Helper()
	select {
	case c := <-ch:
		return c
	case <-time.After(settle):
		t.Fatalf("%s never reached the group's Accept", what)
		return nil
	}
}

// waitClosedByPeer reads c until the far end closes it.
func waitClosedByPeer(t *testing.T, c net.Conn, what string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(settle))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s still open after %v", what, settle)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(settle)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, settle)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// At the cap the connection is served; one past it is closed at once and
// logged with its address; once one closes, a new one is served again.
func TestMaxConnsEdge(t *testing.T) {
	var logs logBuffer
	m := listenWith(t, Options{Logger: logs.logger(), MaxConns: 2})
	accepted := acceptAll(t, m, "g")

	_ = dialGroup(t, m, "g")
	first := waitAccepted(t, accepted, "connection 1 of 2")
	_ = dialGroup(t, m, "g")
	waitAccepted(t, accepted, "connection 2 of 2")
	if st := m.ConnStats(); st.Open != 2 || st.Refused != 0 || st.Max != 2 {
		t.Fatalf("at the cap: %+v, want 2 open, none refused", st)
	}

	third := dialGroup(t, m, "g")
	waitClosedByPeer(t, third, "connection 3 past a cap of 2")
	if st := m.ConnStats(); st.Open != 2 || st.Refused != 1 {
		t.Fatalf("past the cap: %+v, want 2 open, 1 refused", st)
	}
	select {
	case <-accepted:
		t.Fatal("the connection past the cap reached raft")
	default:
	}
	line := logs.String()
	for _, want := range []string{"level=WARN", "raft connection refused", "--max-raft-conns", "remote=" + third.LocalAddr().String(), "limit=2"} {
		if !strings.Contains(line, want) {
			t.Errorf("refusal log lacks %q:\n%s", want, line)
		}
	}

	// Raft closing a served connection frees its place at once.
	_ = first.Close()
	if st := m.ConnStats(); st.Open != 1 {
		t.Fatalf("after closing one: %d open, want 1", st.Open)
	}
	_ = dialGroup(t, m, "g")
	waitAccepted(t, accepted, "a connection after one closed")
}

// A connection whose reader waited IdleTimeout for a byte is closed; one
// carrying traffic is not, however long it lives.
func TestIdleInboundClosed(t *testing.T) {
	const idle = 2 * time.Second
	m := listenWith(t, Options{Logger: quietLogger(), IdleTimeout: idle})
	accepted := acceptAll(t, m, "g")

	// The server side of each connection reads as raft's handler does and
	// reports when its connection is gone.
	serve := func(c net.Conn) <-chan struct{} {
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer c.Close()
			_, _ = io.Copy(io.Discard, c)
		}()
		return done
	}
	busy := dialGroup(t, m, "g")
	busyGone := serve(waitAccepted(t, accepted, "the busy connection"))
	silent := dialGroup(t, m, "g")
	silentAt := time.Now()
	silentGone := serve(waitAccepted(t, accepted, "the silent connection"))

	stop := make(chan struct{})
	writerDone := make(chan error, 1)
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				writerDone <- nil
				return
			case <-tick.C:
				if _, err := busy.Write([]byte{1}); err != nil {
					writerDone <- err
					return
				}
			}
		}
	}()

	select {
	case <-silentGone:
	case <-time.After(idle + settle):
		t.Fatalf("the silent connection is still open %v after its last byte", idle+settle)
	}
	if d := time.Since(silentAt); d < idle {
		t.Fatalf("the silent connection was closed after %v, before the idle timeout %v", d, idle)
	}
	waitClosedByPeer(t, silent, "the silent connection, client side")

	// The busy one outlives two more idle timeouts.
	select {
	case <-busyGone:
		t.Fatal("the connection carrying traffic was closed")
	case err := <-writerDone:
		t.Fatalf("writing on the busy connection: %v", err)
	case <-time.After(2 * idle):
	}
	close(stop)
	if err := <-writerDone; err != nil {
		t.Fatalf("writing on the busy connection: %v", err)
	}
	if st := m.ConnStats(); st.IdleClosed != 1 || st.Open != 1 {
		t.Fatalf("stats %+v, want 1 idle-closed, 1 open", st)
	}
}

// A connection this node dialled closes itself once idle, which the peer
// sees as an ordinary close (no error logged), and raft's next RPC on it,
// taken from raft's pool, goes through on a new connection.
func TestDialSideIdleCloseRedials(t *testing.T) {
	t.Run("plaintext", func(t *testing.T) { testDialSideIdleCloseRedials(t, nil, nil) })
	t.Run("tls", func(t *testing.T) {
		ca := newTestCA(t)
		testDialSideIdleCloseRedials(t, ca.sec(tlsconf.RoleNode, "n1"), ca.sec(tlsconf.RoleNode, "n2"))
	})
}

func testDialSideIdleCloseRedials(t *testing.T, secA, secB *TLS) {
	var bLogs logBuffer
	a := listenWith(t, Options{TLS: secA, Logger: quietLogger(), dialIdle: 300 * time.Millisecond, IdleTimeout: -1})
	b := listenWith(t, Options{TLS: secB, Logger: bLogs.logger(), dialIdle: -1, IdleTimeout: -1})
	ta, tb := mustTransport(t, a, "g"), mustTransport(t, b, "g")
	serve(tb, 2)

	if term, err := appendTo(ta, b.Addr()); err != nil || term != 2 {
		t.Fatalf("first rpc: term %d, %v", term, err)
	}
	waitFor(t, "the idle outbound connection closes", func() bool { return a.dialIdleClosed.Load() >= 1 })
	waitFor(t, "the peer sees it closed", func() bool { return b.ConnStats().Open == 0 })

	for i := range 3 {
		if term, err := appendTo(ta, b.Addr()); err != nil || term != 2 {
			t.Fatalf("rpc %d after the idle close: term %d, %v", i, term, err)
		}
	}
	if n := a.redials.Load(); n != 1 {
		t.Fatalf("%d redials, want 1 (the pooled connection dialled again once)", n)
	}
	if logs := bLogs.String(); strings.Contains(logs, "level=ERROR") {
		t.Fatalf("the peer logged an error for an idle close:\n%s", logs)
	}
}

// The reason for redialConn: raft's pool hands out a connection its peer
// closed, and the RPC on it fails. If this starts passing without errors,
// hashicorp/raft checks pooled connections and redialConn can go.
func TestRaftPoolReusesConnectionPeerClosed(t *testing.T) {
	a := listenWith(t, Options{Logger: quietLogger(), dialIdle: -1, IdleTimeout: -1})
	b := listenWith(t, Options{Logger: quietLogger(), dialIdle: -1, IdleTimeout: 500 * time.Millisecond})
	ta, tb := mustTransport(t, a, "g"), mustTransport(t, b, "g")
	serve(tb, 2)
	if _, err := appendTo(ta, b.Addr()); err != nil {
		t.Fatalf("first rpc: %v", err)
	}
	waitFor(t, "the peer closes the idle connection", func() bool { return b.ConnStats().IdleClosed == 1 })
	if _, err := appendTo(ta, b.Addr()); err == nil {
		t.Fatal("an rpc on a pooled connection the peer closed succeeded: raft now checks its pool")
	}
	if _, err := appendTo(ta, b.Addr()); err != nil {
		t.Fatalf("the rpc after that: %v", err)
	}
}

// Closing an idle inbound connection ends raft's handler as a peer's
// close does: no error logged, TLS or not.
func TestIdleInboundCloseIsQuiet(t *testing.T) {
	ca := newTestCA(t)
	for _, tc := range []struct {
		name       string
		secA, secB *TLS
	}{
		{"plaintext", nil, nil},
		{"tls", ca.sec(tlsconf.RoleNode, "n1"), ca.sec(tlsconf.RoleNode, "n2")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var bLogs logBuffer
			a := listenWith(t, Options{TLS: tc.secA, Logger: quietLogger(), dialIdle: -1, IdleTimeout: -1})
			b := listenWith(t, Options{TLS: tc.secB, Logger: bLogs.logger(), dialIdle: -1, IdleTimeout: 300 * time.Millisecond})
			ta, tb := mustTransport(t, a, "g"), mustTransport(t, b, "g")
			serve(tb, 2)
			if _, err := appendTo(ta, b.Addr()); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the idle connection closes", func() bool { return b.ConnStats().IdleClosed == 1 })
			waitFor(t, "it leaves the count", func() bool { return b.ConnStats().Open == 0 })
			if logs := bLogs.String(); strings.Contains(logs, "level=ERROR") || !strings.Contains(logs, "closed an idle inbound raft connection") {
				t.Fatalf("want one debug line for the idle close and no error:\n%s", logs)
			}
		})
	}
}

// A connection inside a request (its last operation a write: an
// InstallSnapshot reading its snapshot between writes) is never closed
// for idleness; once the answer is read, it is.
func TestDialSideIdleWaitsForTheAnswer(t *testing.T) {
	const idle = 200 * time.Millisecond
	a := listenWith(t, Options{Logger: quietLogger(), dialIdle: idle, IdleTimeout: -1})
	b := listenWith(t, Options{Logger: quietLogger(), dialIdle: -1, IdleTimeout: -1})
	la, err := a.Layer("g")
	if err != nil {
		t.Fatal(err)
	}
	accepted := acceptAll(t, b, "g")
	c, err := la.Dial(raft.ServerAddress(b.Addr()), settle)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	server := waitAccepted(t, accepted, "the dialled connection")

	if _, err := c.Write([]byte("half a request")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len("half a request"))
	if _, err := io.ReadFull(server, got); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * idle)
	if n := a.dialIdleClosed.Load(); n != 0 {
		t.Fatal("a connection waiting inside a request was closed for idleness")
	}

	if _, err := server.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the answered connection closes once idle", func() bool { return a.dialIdleClosed.Load() == 1 })
	waitClosedByPeer(t, server, "the idle connection, peer side")
}
