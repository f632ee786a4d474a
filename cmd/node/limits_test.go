package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/raftq/raftq/internal/connlimit"
)

// Generous bounds: these tests run with -race on a loaded 2-core machine
// and wait on events, not on sleeps.
const limitSettle = 10 * time.Second

// healthServer serves the health service with opts on loopback; lim's
// listener counts its connections open, and accepted counts every one it
// accepted.
func healthServer(t *testing.T, lim *connlimit.Limiter, opts ...grpc.ServerOption) (addr string, hs *health.Server, accepted *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(opts...)
	hs = health.NewServer()
	healthpb.RegisterHealthServer(s, hs)
	counted := &countingListener{Listener: ln}
	go func() { _ = s.Serve(lim.Listener(counted)) }()
	t.Cleanup(s.Stop)
	return ln.Addr().String(), hs, &counted.n
}

type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

func healthClient(t *testing.T, addr string) healthpb.HealthClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return healthpb.NewHealthClient(cc)
}

// watch opens a Watch stream (a call that stays in flight, as a long poll
// or a backup stream does) and reads its first status.
func watch(t *testing.T, ctx context.Context, hc healthpb.HealthClient) healthpb.Health_WatchClient {
	t.Helper()
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatalf("watch: %v", err)
	}
	return w
}

func noLimit() *connlimit.Limiter {
	return connlimit.New(connlimit.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

// With --max-streams-per-conn 2, two calls are in flight on a connection
// and a third waits, as gRPC documents, until one of them finishes; it is
// not refused.
func TestMaxStreamsPerConnEdge(t *testing.T) {
	lim := noLimit()
	addr, _, _ := healthServer(t, lim, clientLimits(lim, 2)...)
	hc := healthClient(t, addr)

	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	watch(t, ctx1, hc)
	watch(t, ctx2, hc)

	third := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*limitSettle)
		defer cancel()
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		third <- err
	}()
	// Only an absence can be shown here; without the cap the call would
	// be answered within milliseconds.
	select {
	case err := <-third:
		t.Fatalf("a third call ran beside two in flight at a cap of 2: %v", err)
	case <-time.After(500 * time.Millisecond):
	}

	cancel1()
	select {
	case err := <-third:
		if err != nil {
			t.Fatalf("the waiting call, once a stream freed: %v", err)
		}
	case <-time.After(limitSettle):
		t.Fatalf("the waiting call did not run within %v of a stream freeing", limitSettle)
	}
	if st := lim.Stats(); st.Open != 1 {
		t.Fatalf("%d connections, want the calls on one", st.Open)
	}
}

// At the connection's age a call in flight is not cut (no grace): it goes
// on, on the old connection, while new calls go over a new one.
func TestConnAgeLeavesCallsInFlight(t *testing.T) {
	const age = 300 * time.Millisecond
	lim := noLimit()
	addr, hs, accepted := healthServer(t, lim, connAging(0, age))
	hc := healthClient(t, addr)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := watch(t, ctx, hc)

	// Calls made past the age go over a new connection.
	time.Sleep(2 * age)
	for range 3 {
		cctx, ccancel := context.WithTimeout(context.Background(), limitSettle)
		_, err := hc.Check(cctx, &healthpb.HealthCheckRequest{})
		ccancel()
		if err != nil {
			t.Fatalf("a call after the connection's age: %v", err)
		}
		time.Sleep(age)
	}

	// Many times the age later, the first call still answers.
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	got, err := w.Recv()
	if err != nil {
		t.Fatalf("the call in flight at the connection's age was cut: %v", err)
	}
	if got.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("watch got %v, want NOT_SERVING", got.GetStatus())
	}
	if n := accepted.Load(); n < 2 {
		t.Fatalf("%d connection accepted: the connection never aged", n)
	}
}

// A connection with no call in flight for the idle time is closed; one
// with a call in flight is not.
func TestClientIdleCloses(t *testing.T) {
	const idle = 300 * time.Millisecond
	lim := noLimit()
	addr, hs, _ := healthServer(t, lim, connAging(idle, 0))
	idleClient, busyClient := healthClient(t, addr), healthClient(t, addr)
	for _, hc := range []healthpb.HealthClient{idleClient, busyClient} {
		cctx, ccancel := context.WithTimeout(context.Background(), limitSettle)
		if _, err := hc.Check(cctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
		ccancel()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := watch(t, ctx, busyClient)
	waitUntil(t, "the idle connection closes", func() bool { return lim.Stats().Open == 1 })
	time.Sleep(3 * idle)
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	if _, err := w.Recv(); err != nil {
		t.Fatalf("the connection with a call in flight was closed: %v", err)
	}
	if st := lim.Stats(); st.Open != 1 {
		t.Fatalf("%d connections open, want the busy one", st.Open)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limitSettle)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limitSettle)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
