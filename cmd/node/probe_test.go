package main

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// mustHealthServer serves grpc_health_v1 on a loopback port with the given
// status for the whole server.
func mustHealthServer(t *testing.T, st healthpb.HealthCheckResponse_ServingStatus) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	gs := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("", st)
	healthpb.RegisterHealthServer(gs, hs)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}

// mustClosedAddr returns a loopback address nothing listens on.
func mustClosedAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := lis.Addr().String()
	if err := lis.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	return addr
}

func TestProbe(t *testing.T) {
	serving := mustHealthServer(t, healthpb.HealthCheckResponse_SERVING)
	notServing := mustHealthServer(t, healthpb.HealthCheckResponse_NOT_SERVING)
	closed := mustClosedAddr(t)
	tests := []struct {
		name    string
		args    []string
		want    int
		wantOut string
		// within bounds the probe's run time; 0: not checked (a probe that
		// answers or fails on its own is bounded by the exit status and
		// output checks: past its timeout it would say DeadlineExceeded).
		within time.Duration
	}{
		{"serving", []string{"--addr", serving}, probeHealthy, "SERVING", 0},
		{"not serving", []string{"--addr", notServing}, probeUnhealthy, "NOT_SERVING", 0},
		{"unknown service", []string{"--addr", serving, "--service", "nope"}, probeUnhealthy, "NotFound", 0},
		// Only --timeout ends this wait (WaitForReady). Ignoring it would
		// take at least the 3 s default (or the 10 s context below if no
		// deadline were set at all), so 3 s is the widest bound that still
		// fails then; it leaves 2.7 s of slack over the 300 ms asked for.
		{"nothing listening", []string{"--addr", closed, "--timeout", "300ms"}, probeUnhealthy, "DeadlineExceeded", 3 * time.Second},
		{"bad flag", []string{"--bogus"}, probeUnhealthy, "", 0},
		{"stray argument", []string{"--addr", serving, "extra"}, probeUnhealthy, "", 0},
		{"zero timeout", []string{"--addr", serving, "--timeout", "0s"}, probeUnhealthy, "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			// Bounded, so a probe that ignored every timeout fails instead of
			// hanging the test binary.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			got := probeMain(ctx, tc.args, func(string) string { return "" }, &out, &errOut)
			if got != tc.want {
				t.Fatalf("exit %d, want %d (stdout %q, stderr %q)", got, tc.want, out.String(), errOut.String())
			}
			if !strings.Contains(out.String(), tc.wantOut) {
				t.Fatalf("stdout %q does not contain %q", out.String(), tc.wantOut)
			}
			if tc.wantOut != "" && strings.Count(out.String(), "\n") != 1 {
				t.Fatalf("want one line of output, got %q", out.String())
			}
			if d := time.Since(start); tc.within > 0 && d > tc.within {
				t.Fatalf("probe took %v, beyond its timeout", d)
			}
		})
	}
}
