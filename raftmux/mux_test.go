package raftmux

import (
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func mustListen(t *testing.T) *Mux {
	t.Helper()
	m, err := Listen("127.0.0.1:0", "", quietLogger())
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func mustTransport(t *testing.T, m *Mux, group string) raft.Transport {
	t.Helper()
	tr, err := m.Transport(group, TransportOptions{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("transport %q: %v", group, err)
	}
	t.Cleanup(func() { closeTransport(tr) })
	return tr
}

func closeTransport(tr raft.Transport) {
	if c, ok := tr.(raft.WithClose); ok {
		_ = c.Close()
	}
}

// serve answers every AppendEntries on tr with the given term, so the caller
// can tell which group's consumer handled the RPC.
func serve(tr raft.Transport, term uint64) {
	go func() {
		for rpc := range tr.Consumer() {
			rpc.Respond(&raft.AppendEntriesResponse{Term: term, Success: true}, nil)
		}
	}()
}

func appendTo(from raft.Transport, to string) (uint64, error) {
	var resp raft.AppendEntriesResponse
	err := from.AppendEntries("peer", raft.ServerAddress(to), &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ID: []byte("client"), Addr: []byte("client")},
		Term:      1,
	}, &resp)
	return resp.Term, err
}

func TestTwoGroupsShareOnePort(t *testing.T) {
	a, b := mustListen(t), mustListen(t)
	aMeta, aShard := mustTransport(t, a, "meta"), mustTransport(t, a, "shard-3")
	bMeta, bShard := mustTransport(t, b, "meta"), mustTransport(t, b, "shard-3")
	serve(bMeta, 100)
	serve(bShard, 303)

	for _, tc := range []struct {
		name string
		from raft.Transport
		want uint64
	}{
		{"meta", aMeta, 100},
		{"shard-3", aShard, 303},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range 3 { // reuse of pooled connections must keep the group
				got, err := appendTo(tc.from, b.Addr())
				if err != nil {
					t.Fatalf("rpc %d: %v", i, err)
				}
				if got != tc.want {
					t.Fatalf("rpc %d answered by term %d, want %d (wrong group)", i, got, tc.want)
				}
			}
		})
	}
	if got := aMeta.LocalAddr(); string(got) != a.Addr() {
		t.Fatalf("LocalAddr = %q, want advertised %q", got, a.Addr())
	}
}

// expectClosed asserts the server closes conn without sending anything.
func expectClosed(t *testing.T, conn net.Conn) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	n, err := conn.Read(make([]byte, 16))
	if err == nil || n != 0 {
		t.Fatalf("read = %d, %v; want the server to close the connection", n, err)
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("connection still open after 3 s: %v", err)
	}
}

func TestRejectedConnections(t *testing.T) {
	m := mustListen(t)
	serve(mustTransport(t, m, "meta"), 1)
	unknown, err := encodeHeader("shard-99")
	if err != nil {
		t.Fatal(err)
	}
	badVersion := []byte{headerMagic, 9, 4, 'm', 'e', 't', 'a'}
	for _, tc := range []struct {
		name  string
		bytes []byte
	}{
		{"unknown group", unknown},
		{"garbage", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")},
		{"bad version", badVersion},
		{"empty group", []byte{headerMagic, headerVersion, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", m.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.Write(tc.bytes); err != nil {
				t.Fatal(err)
			}
			expectClosed(t, conn)
		})
	}
	// The port keeps serving after rejections.
	if _, err := appendTo(mustTransport(t, mustListen(t), "meta"), m.Addr()); err != nil {
		t.Fatalf("rpc after rejections: %v", err)
	}
}

func TestClosingOneGroupLeavesOthers(t *testing.T) {
	a, b := mustListen(t), mustListen(t)
	aMeta, aShard := mustTransport(t, a, "meta"), mustTransport(t, a, "shard-1")
	bMeta := mustTransport(t, b, "meta")
	bShard, err := b.Transport("shard-1", TransportOptions{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	serve(bMeta, 7)
	serve(bShard, 8)
	if _, err := appendTo(aShard, b.Addr()); err != nil {
		t.Fatalf("shard rpc before close: %v", err)
	}

	closeTransport(bShard)
	if _, err := appendTo(aShard, b.Addr()); err == nil {
		t.Fatal("rpc to a closed group succeeded")
	}
	if got, err := appendTo(aMeta, b.Addr()); err != nil || got != 7 {
		t.Fatalf("meta rpc after closing shard-1 = %d, %v; want 7, nil", got, err)
	}

	// The id can be registered again and serves new connections.
	bShard2 := mustTransport(t, b, "shard-1")
	serve(bShard2, 9)
	var got uint64
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) { // pooled dead conns fail first, then redial
		if got, err = appendTo(aShard, b.Addr()); err == nil {
			break
		}
	}
	if err != nil || got != 9 {
		t.Fatalf("rpc to re-registered group = %d, %v; want 9, nil", got, err)
	}
}

// A closed group must cut the connections it already accepted: raft's own
// Close leaves their handlers running, and they would keep answering.
func TestClosingLayerCutsAcceptedConns(t *testing.T) {
	a, b := mustListen(t), mustListen(t)
	aLayer, err := a.Layer("shard-2")
	if err != nil {
		t.Fatal(err)
	}
	bLayer, err := b.Layer("shard-2")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := bLayer.Accept(); err == nil {
			accepted <- c
		}
	}()
	client, err := aLayer.Dial(raft.ServerAddress(b.Addr()), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	select {
	case <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("connection never reached the group's Accept")
	}
	if err := bLayer.Close(); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, client)
	if _, err := bLayer.Accept(); err == nil {
		t.Fatal("Accept on a closed layer succeeded")
	}
}

func TestRegistration(t *testing.T) {
	m := mustListen(t)
	mustTransport(t, m, "meta")
	for _, tc := range []struct {
		name, group, wantErr string
	}{
		{"duplicate", "meta", "already registered"},
		{"empty", "", "must be 1..255"},
		{"too long", strings.Repeat("x", 256), "must be 1..255"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := m.Transport(tc.group, TransportOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want containing %q", err, tc.wantErr)
			}
		})
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Transport("late", TransportOptions{}); err == nil {
		t.Fatal("Transport on a closed mux succeeded")
	}
}

func TestCloseCutsSilentHandshake(t *testing.T) {
	m, err := Listen("127.0.0.1:0", "", quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", m.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	time.Sleep(50 * time.Millisecond) // let the mux accept it
	start := time.Now()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > headerTimeout/2 {
		t.Fatalf("Close waited %v for a silent peer", d)
	}
}

// An isolated mux carries no raft traffic either way, on new or pooled
// connections, and carries it again once released.
func TestIsolatedMuxCarriesNothing(t *testing.T) {
	a, b := mustListen(t), mustListen(t)
	ta, tb := mustTransport(t, a, "g"), mustTransport(t, b, "g")
	serve(ta, 1)
	serve(tb, 2)
	if term, err := appendTo(ta, b.Addr()); err != nil || term != 2 {
		t.Fatalf("before isolation: term %d err %v", term, err)
	}
	for _, iso := range []*Mux{a, b} {
		iso.SetIsolated(true)
		if !iso.Isolated() {
			t.Fatal("Isolated() false after SetIsolated(true)")
		}
		// The pooled connection from the first call must not carry this.
		if _, err := appendTo(ta, b.Addr()); err == nil {
			t.Fatalf("a->b got through with %s isolated", iso.Addr())
		}
		if _, err := appendTo(tb, a.Addr()); err == nil {
			t.Fatalf("b->a got through with %s isolated", iso.Addr())
		}
		iso.SetIsolated(false)
		if term, err := appendTo(ta, b.Addr()); err != nil || term != 2 {
			t.Fatalf("after release of %s: term %d err %v", iso.Addr(), term, err)
		}
	}
}
