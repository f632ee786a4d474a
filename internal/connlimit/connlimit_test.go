package connlimit

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// Generous bounds: the tests run with -race on a loaded 2-core machine and
// wait on events, not on sleeps.
const settle = 10 * time.Second

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

// serve runs a gRPC server with the health service under lim on
// loopback and returns its address.
func serve(t *testing.T, lim *Limiter) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(lim.ServerOptions()...)
	healthpb.RegisterHealthServer(s, health.NewServer())
	go func() { _ = s.Serve(lim.Listener(ln)) }()
	t.Cleanup(s.Stop)
	return ln.Addr().String()
}

// client is one connection: grpc.NewClient with one address keeps one.
func client(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func check(cc *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	_, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
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

// wantRefused asserts err is the refusal of a connection past a limit of
// max: RESOURCE_EXHAUSTED naming the node and the flag, with a RetryInfo.
func wantRefused(t *testing.T, err error, max string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("call past the limit: %v, want RESOURCE_EXHAUSTED", err)
	}
	for _, want := range []string{"node n1 has " + max + " client connections", "--max-client-conns " + max} {
		if !strings.Contains(st.Message(), want) {
			t.Errorf("refusal %q lacks %q", st.Message(), want)
		}
	}
	var retry *errdetails.RetryInfo
	for _, d := range st.Details() {
		if r, ok := d.(*errdetails.RetryInfo); ok {
			retry = r
		}
	}
	if retry == nil || retry.GetRetryDelay().AsDuration() != time.Second {
		t.Errorf("refusal details %v, want a RetryInfo of 1s", st.Details())
	}
}

// Two connections at a limit of two are served; the third is answered
// RESOURCE_EXHAUSTED on every call, unary or streaming, and logged; once
// a served connection closes, the third is served.
func TestMaxEdge(t *testing.T) {
	var logs logBuffer
	var opened, refusedAtLimit atomic.Int64
	lim := New(Options{Node: "n1", Flag: "--max-client-conns", Max: 2, Ceiling: -1,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Opened: func(d int) { opened.Add(int64(d)) },
		Refused: func(at string) {
			if at == "limit" {
				refusedAtLimit.Add(1)
			}
		}})
	addr := serve(t, lim)

	c1, c2, c3 := client(t, addr), client(t, addr), client(t, addr)
	for i, cc := range []*grpc.ClientConn{c1, c2} {
		if err := check(cc); err != nil {
			t.Fatalf("connection %d of 2: %v", i+1, err)
		}
	}
	wantRefused(t, check(c3), "2")
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	w, err := healthpb.NewHealthClient(c3).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = w.Recv()
	}
	wantRefused(t, err, "2")
	if err := check(c2); err != nil {
		t.Fatalf("a served connection after the refusals: %v", err)
	}
	if st := lim.Stats(); st.Served != 2 || st.Open != 3 || st.RefusedLimit != 1 {
		t.Fatalf("stats %+v, want 2 served of 3 open, 1 refused", st)
	}
	if n := refusedAtLimit.Load(); n != 1 {
		t.Errorf("%d refusals counted at limit, want 1", n)
	}
	line := logs.String()
	for _, want := range []string{"level=WARN", "client connection past --max-client-conns 2", "remote=127.0.0.1:"} {
		if !strings.Contains(line, want) {
			t.Errorf("log lacks %q:\n%s", want, line)
		}
	}

	_ = c1.Close()
	waitFor(t, "the closed connection gives its place back", func() bool { return lim.Stats().Served == 1 })
	if err := check(c3); err != nil {
		t.Fatalf("the refused connection once a place freed: %v", err)
	}
	if st := lim.Stats(); st.Served != 2 {
		t.Fatalf("stats %+v, want 2 served", st)
	}
	if n := opened.Load(); n != 2 {
		t.Fatalf("open connections metric %d, want 2", n)
	}
}

// Exempt methods (health checks) are served on a connection past the
// limit.
func TestExemptServedPastMax(t *testing.T) {
	lim := New(Options{Node: "n1", Flag: "--max-client-conns", Max: 1, Ceiling: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Exempt: func(m string) bool { return m == healthpb.Health_Check_FullMethodName }})
	addr := serve(t, lim)
	c1, c2 := client(t, addr), client(t, addr)
	if err := check(c1); err != nil {
		t.Fatal(err)
	}
	if err := check(c2); err != nil {
		t.Fatalf("health check past the limit: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	w, err := healthpb.NewHealthClient(c2).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = w.Recv()
	}
	wantRefused(t, err, "1")
}

// At the ceiling, an accepted connection is closed at once and logged
// with its address; once one closes, connections are accepted again.
func TestCeilingEdge(t *testing.T) {
	var logs logBuffer
	lim := New(Options{Node: "n1", Flag: "--max-client-conns", Max: 1, Ceiling: 2, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	addr := serve(t, lim)

	raw := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	first := raw()
	_ = raw()
	waitFor(t, "two connections counted", func() bool { return lim.Stats().Open == 2 })

	third := raw()
	_ = third.SetReadDeadline(time.Now().Add(settle))
	if _, err := io.Copy(io.Discard, third); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("connection 3 past a ceiling of 2 still open after %v", settle)
		}
	}
	if st := lim.Stats(); st.Open != 2 || st.RefusedCeiling != 1 {
		t.Fatalf("stats %+v, want 2 open, 1 refused at the ceiling", st)
	}
	line := logs.String()
	for _, want := range []string{"level=WARN", "client connection closed on accept", "ceiling above --max-client-conns 1", "remote=" + third.LocalAddr().String()} {
		if !strings.Contains(line, want) {
			t.Errorf("log lacks %q:\n%s", want, line)
		}
	}

	_ = first.Close()
	waitFor(t, "the closed connection leaves the count", func() bool { return lim.Stats().Open == 1 })
	if err := check(client(t, addr)); err != nil {
		t.Fatalf("a connection once below the ceiling: %v", err)
	}
}

// AlwaysAccept lets a connection past the ceiling (the node's own probe).
func TestAlwaysAcceptPastCeiling(t *testing.T) {
	lim := New(Options{Node: "n1", Flag: "--max-client-conns", Max: 1, Ceiling: 1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		AlwaysAccept: func(net.Addr) bool { return true },
		Exempt:       func(m string) bool { return m == healthpb.Health_Check_FullMethodName }})
	addr := serve(t, lim)
	if err := check(client(t, addr)); err != nil {
		t.Fatal(err)
	}
	if err := check(client(t, addr)); err != nil {
		t.Fatalf("an always-accepted connection past the ceiling: %v", err)
	}
}

func TestDefaultCeiling(t *testing.T) {
	for limit, want := range map[int]int{2: 18, 100: 116, 10000: 11000} {
		if got := DefaultCeiling(limit); got != want {
			t.Errorf("DefaultCeiling(%d) = %d, want %d", limit, got, want)
		}
	}
	if lim := New(Options{Max: 0}); lim.ceiling != 0 {
		t.Errorf("no limit, ceiling %d; want none", lim.ceiling)
	}
}
