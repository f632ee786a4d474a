package tlsconf

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pki is a CA with its file under a test directory.
type pki struct {
	t      *testing.T
	dir    string
	ca     *CA
	caFile string
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	dir := t.TempDir()
	ca, err := NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p := &pki{t: t, dir: dir, ca: ca, caFile: filepath.Join(dir, "ca.crt")}
	if err := ca.Save(p.caFile, filepath.Join(dir, "ca.key")); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *pki) issue(role Role, name string, hosts ...string) Files {
	p.t.Helper()
	f, err := p.ca.IssueFiles(Request{Identity: Identity{Role: role, Name: name}, Hosts: hosts, ValidFor: time.Hour},
		p.dir, string(role)+"-"+name, p.caFile)
	if err != nil {
		p.t.Fatal(err)
	}
	return f
}

func (p *pki) store(role Role, name string, hosts ...string) *Store {
	p.t.Helper()
	s, err := Load(p.issue(role, name, hosts...))
	if err != nil {
		p.t.Fatal(err)
	}
	return s
}

// handshake runs one TLS handshake over loopback and returns both sides'
// errors.
func handshake(t *testing.T, server, client *tls.Config) (serverErr, clientErr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		done <- tls.Server(c, server).Handshake()
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	tc := tls.Client(c, client)
	clientErr = tc.Handshake()
	if clientErr == nil {
		// TLS 1.3 reports a refused client certificate on the first read.
		_, clientErr = tc.Read(make([]byte, 1))
		if errors.Is(clientErr, os.ErrDeadlineExceeded) || clientErr != nil && strings.Contains(clientErr.Error(), "EOF") {
			clientErr = nil
		}
	}
	_ = tc.Close()
	return <-done, clientErr
}

func TestIdentityRoundTrip(t *testing.T) {
	p := newPKI(t)
	s := p.store(RoleNode, "n1", "127.0.0.1", "localhost")
	if got := s.Identity(); got != (Identity{Role: RoleNode, Name: "n1"}) {
		t.Fatalf("identity %v", got)
	}
	for _, bad := range []Identity{{Role: "admin", Name: "x"}, {Role: RoleNode}, {Role: RoleNode, Name: "a/b"}} {
		if _, _, err := p.ca.Issue(Request{Identity: bad, ValidFor: time.Hour}); err == nil {
			t.Fatalf("issued a certificate for %v", bad)
		}
	}
}

func TestLoadRefusesMismatchedFiles(t *testing.T) {
	p, other := newPKI(t), newPKI(t)
	good := p.issue(RoleNode, "n1")
	foreign := other.issue(RoleNode, "n1")
	cases := map[string]Files{
		"other CA":       {CA: p.caFile, Cert: foreign.Cert, Key: foreign.Key},
		"key of another": {CA: p.caFile, Cert: good.Cert, Key: foreign.Key},
		"missing key":    {CA: p.caFile, Cert: good.Cert},
		"no such CA":     {CA: filepath.Join(p.dir, "nope"), Cert: good.Cert, Key: good.Key},
	}
	for name, f := range cases {
		if _, err := Load(f); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
}

func TestMembersPortTakesNodeCertificatesOnly(t *testing.T) {
	p := newPKI(t)
	srv := p.store(RoleNode, "n1")
	node2 := p.store(RoleNode, "n2")
	client := p.store(RoleClient, "app")
	if se, ce := handshake(t, srv.Members(ALPNRaft), node2.Dialer(ALPNRaft, "n1")); se != nil || ce != nil {
		t.Fatalf("node to node: server %v, client %v", se, ce)
	}
	// The attackers below check nothing of the server, so every refusal
	// asserted is the server's own.
	attacker := func(s *Store) *tls.Config {
		c := &tls.Config{InsecureSkipVerify: true, NextProtos: ALPNRaft} //nolint:gosec // an attacker
		if s != nil {
			c.Certificates = []tls.Certificate{*s.cur.Load().cert}
		}
		return c
	}
	for _, tc := range []struct {
		name string
		cfg  *tls.Config
		want string
	}{
		{"client certificate of the CA", attacker(client), "node certificates only"},
		{"no certificate", attacker(nil), "certificate"},
		{"node certificate of another CA", attacker(newPKI(t).store(RoleNode, "n2")), "unknown authority"},
	} {
		se, _ := handshake(t, srv.Members(ALPNRaft), tc.cfg)
		if se == nil || !strings.Contains(se.Error(), tc.want) {
			t.Errorf("%s on the members port: server said %v, want %q", tc.name, se, tc.want)
		}
	}
	// The client port takes no certificate, or one of the CA.
	grpcAttacker := func(s *Store) *tls.Config {
		c := attacker(s)
		c.NextProtos = ALPNGRPC
		return c
	}
	if se, _ := handshake(t, srv.ClientPort(), grpcAttacker(nil)); se != nil {
		t.Errorf("client port without a client certificate: %v", se)
	}
	if se, _ := handshake(t, srv.ClientPort(), grpcAttacker(newPKI(t).store(RoleClient, "x"))); se == nil {
		t.Error("client port took a client certificate of another CA")
	}
}

func TestDialerChecksTheExpectedNode(t *testing.T) {
	p := newPKI(t)
	srv := p.store(RoleNode, "n1")
	dialer := p.store(RoleNode, "n2")
	_, ce := handshake(t, srv.Members(ALPNRaft), dialer.Dialer(ALPNRaft, "n3"))
	if ce == nil || !strings.Contains(ce.Error(), `node "n3" was expected`) {
		t.Fatalf("dialing n3 and meeting n1: %v", ce)
	}
	// A server with a certificate from another CA is refused by the dialer.
	stranger := newPKI(t).store(RoleNode, "n1")
	if _, ce := handshake(t, stranger.Members(ALPNRaft), dialer.Dialer(ALPNRaft, "n1")); ce == nil {
		t.Fatal("dialer accepted a node from another CA")
	}
}

func TestReloadSwapsMaterialForNewHandshakes(t *testing.T) {
	p := newPKI(t)
	f := p.issue(RoleNode, "n1")
	s, err := Load(f)
	if err != nil {
		t.Fatal(err)
	}
	before := s.cur.Load().leaf.SerialNumber
	// A half-written rotation (a key that is not PEM) keeps the old one.
	if err := os.WriteFile(f.Key, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err == nil {
		t.Fatal("reload took a broken key")
	}
	if s.cur.Load().leaf.SerialNumber.Cmp(before) != 0 {
		t.Fatal("a failed reload changed the material")
	}
	p.issue(RoleNode, "n1") // rewrites the same files
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	after := s.cur.Load().leaf.SerialNumber
	if after.Cmp(before) == 0 {
		t.Fatal("reload kept the old certificate")
	}
	// The next handshake serves the new certificate.
	dialer := p.store(RoleNode, "n2").Dialer(ALPNRaft, "n1")
	var served string
	verify := dialer.VerifyConnection
	dialer.VerifyConnection = func(cs tls.ConnectionState) error {
		served = cs.PeerCertificates[0].SerialNumber.String()
		return verify(cs)
	}
	if se, ce := handshake(t, s.Members(ALPNRaft), dialer); se != nil || ce != nil {
		t.Fatalf("server %v, client %v", se, ce)
	}
	if served != after.String() {
		t.Fatalf("served serial %s, want the reloaded %s", served, after)
	}
}

func TestClientFilesCheckTheNodeByName(t *testing.T) {
	p := newPKI(t)
	srv := p.store(RoleNode, "n1", "127.0.0.1", "localhost")
	cfg, err := ClientFiles(p.caFile, "", "")
	if err != nil {
		t.Fatal(err)
	}
	cfg.ServerName = "localhost"
	if se, ce := handshake(t, srv.ClientPort(), cfg); se != nil || ce != nil {
		t.Fatalf("server %v, client %v", se, ce)
	}
	cfg.ServerName = "elsewhere.example"
	if _, ce := handshake(t, srv.ClientPort(), cfg); ce == nil {
		t.Fatal("client accepted a certificate for another name")
	}
	if _, err := ClientFiles(p.caFile, "x.crt", ""); err == nil {
		t.Fatal("a certificate without its key was taken")
	}
}
