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
	}{
		{"serving", []string{"--addr", serving}, probeHealthy, "SERVING"},
		{"not serving", []string{"--addr", notServing}, probeUnhealthy, "NOT_SERVING"},
		{"unknown service", []string{"--addr", serving, "--service", "nope"}, probeUnhealthy, "NotFound"},
		{"nothing listening", []string{"--addr", closed, "--timeout", "300ms"}, probeUnhealthy, "DeadlineExceeded"},
		{"bad flag", []string{"--bogus"}, probeUnhealthy, ""},
		{"stray argument", []string{"--addr", serving, "extra"}, probeUnhealthy, ""},
		{"zero timeout", []string{"--addr", serving, "--timeout", "0s"}, probeUnhealthy, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			start := time.Now()
			got := probeMain(context.Background(), tc.args, &out, &errOut)
			if got != tc.want {
				t.Fatalf("exit %d, want %d (stdout %q, stderr %q)", got, tc.want, out.String(), errOut.String())
			}
			if !strings.Contains(out.String(), tc.wantOut) {
				t.Fatalf("stdout %q does not contain %q", out.String(), tc.wantOut)
			}
			if tc.wantOut != "" && strings.Count(out.String(), "\n") != 1 {
				t.Fatalf("want one line of output, got %q", out.String())
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("probe took %v, beyond its timeout", d)
			}
		})
	}
}
