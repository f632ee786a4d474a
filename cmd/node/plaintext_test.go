package main

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/raftq/raftq/tlsconf"
)

// TestClientPortSplit serves a health service over TLS behind splitTLS and
// the refusal on the plaintext side: a TLS client is served, a plaintext
// one told why it is not, and closing the port ends both sides.
func TestClientPortSplit(t *testing.T) {
	d, err := tlsconf.InitDir(filepath.Join(t.TempDir(), "certs"), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	f, err := d.IssueNode("n1", []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	st, err := tlsconf.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tlsLn, plainLn := splitTLS(ln)
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(st.ClientPort())))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	refused := refusePlaintext()
	served := make(chan error, 2)
	go func() { served <- gs.Serve(tlsLn) }()
	go func() { served <- refused.Serve(plainLn) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	cfg, err := tlsconf.ClientFiles(f.CA, "", "")
	if err != nil {
		t.Fatal(err)
	}
	check := func(creds credentials.TransportCredentials) error {
		cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		_, err = healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	if err := check(credentials.NewTLS(cfg)); err != nil {
		t.Fatalf("TLS client: %v", err)
	}
	err = check(insecure.NewCredentials())
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "takes TLS connections only") {
		t.Fatalf("plaintext client: %v; want UNAUTHENTICATED naming TLS", err)
	}
	// A connection that never sends a byte does not hold up the others.
	idle, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	if err := check(credentials.NewTLS(cfg)); err != nil {
		t.Fatalf("TLS client beside an idle connection: %v", err)
	}

	gs.Stop()
	refused.Stop()
	for range 2 {
		if err := <-served; err != nil && !errors.Is(err, net.ErrClosed) {
			t.Fatalf("serve: %v", err)
		}
	}
	if _, err := plainLn.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("accept after close: %v", err)
	}
}
