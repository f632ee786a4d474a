package raftmux

import (
	"context"
	"crypto/tls"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/tlsconf"
)

// testCA issues certificates for the TLS tests.
type testCA struct {
	t      *testing.T
	ca     *tlsconf.CA
	dir    string
	caFile string
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	ca, err := tlsconf.NewCA("raftmux test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	c := &testCA{t: t, ca: ca, dir: dir, caFile: filepath.Join(dir, "ca.crt")}
	if err := ca.Save(c.caFile, filepath.Join(dir, "ca.key")); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *testCA) sec(role tlsconf.Role, name string) *TLS {
	c.t.Helper()
	f, err := c.ca.IssueFiles(tlsconf.Request{Identity: tlsconf.Identity{Role: role, Name: name}, ValidFor: time.Hour},
		c.dir, string(role)+"-"+name, c.caFile)
	if err != nil {
		c.t.Fatal(err)
	}
	s, err := tlsconf.Load(f)
	if err != nil {
		c.t.Fatal(err)
	}
	return &TLS{Server: s.Members(tlsconf.ALPNRaft), Dial: func(expect string) *tls.Config { return s.Dialer(tlsconf.ALPNRaft, expect) }}
}

func mustListenTLS(t *testing.T, sec *TLS) *Mux {
	t.Helper()
	m, err := ListenTLS("127.0.0.1:0", "", sec, quietLogger())
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// countRPCs answers AppendEntries on tr and counts them.
func countRPCs(tr raft.Transport) *atomic.Int64 {
	var n atomic.Int64
	go func() {
		for rpc := range tr.Consumer() {
			n.Add(1)
			rpc.Respond(&raft.AppendEntriesResponse{Term: 7, Success: true}, nil)
		}
	}()
	return &n
}

func TestTLSMembersCarryRaft(t *testing.T) {
	ca := newTestCA(t)
	a, b := mustListenTLS(t, ca.sec(tlsconf.RoleNode, "a")), mustListenTLS(t, ca.sec(tlsconf.RoleNode, "b"))
	got := countRPCs(mustTransport(t, b, "meta"))
	from := mustTransport(t, a, "meta")
	for i := range 3 {
		if term, err := appendTo(from, b.Addr()); err != nil || term != 7 {
			t.Fatalf("rpc %d: term %d, %v", i, term, err)
		}
	}
	if got.Load() != 3 {
		t.Fatalf("%d RPCs served, want 3", got.Load())
	}
}

// TestTLSRefusesOutsiders attacks a TLS raft port: a raw AppendEntries in
// plaintext, a plaintext mux, a client certificate of the same CA and a node
// certificate of another CA. None may reach raft.
func TestTLSRefusesOutsiders(t *testing.T) {
	ca := newTestCA(t)
	target := mustListenTLS(t, ca.sec(tlsconf.RoleNode, "b"))
	served := countRPCs(mustTransport(t, target, "meta"))

	t.Run("raw plaintext AppendEntries", func(t *testing.T) {
		conn, err := net.Dial("tcp", target.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		hdr, _ := encodeHeader("meta")
		// rpcAppendEntries (0) followed by garbage where the msgpack body
		// would be: the far end must close before raft decodes anything.
		_, _ = conn.Write(append(hdr, 0, 0x80))
		expectClosed(t, conn)
	})
	for _, tc := range []struct {
		name string
		sec  *TLS
	}{
		{"plaintext mux", nil},
		{"client certificate", ca.sec(tlsconf.RoleClient, "app")},
		{"node of another CA", newTestCA(t).sec(tlsconf.RoleNode, "a")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from := mustTransport(t, mustListenTLS(t, tc.sec), "meta")
			if _, err := appendTo(from, target.Addr()); err == nil {
				t.Fatal("AppendEntries went through")
			}
		})
	}
	if n := served.Load(); n != 0 {
		t.Fatalf("raft served %d RPCs from outsiders", n)
	}
}

func TestProveIdentity(t *testing.T) {
	ca := newTestCA(t)
	a, b := mustListenTLS(t, ca.sec(tlsconf.RoleNode, "a")), mustListenTLS(t, ca.sec(tlsconf.RoleNode, "b"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.Prove(ctx, b.Addr(), "b"); err != nil {
		t.Fatalf("b at its own address: %v", err)
	}
	if err := a.Prove(ctx, b.Addr(), "c"); err == nil {
		t.Fatal("b's address proved to be node c")
	}
	if err := mustListen(t).Prove(ctx, b.Addr(), "anything"); err != nil {
		t.Fatalf("a plaintext mux has nothing to prove: %v", err)
	}
}
