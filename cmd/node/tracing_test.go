package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"
)

func TestParseConfigTracing(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--trace-sample", "1.5"}, "--trace-sample must be within 0..1"},
		{[]string{"--trace-sample", "-0.1"}, "--trace-sample must be within 0..1"},
		{[]string{"--trace-sample", "half"}, "invalid value"},
		{[]string{"--otlp-insecure"}, "--otlp-insecure needs --otlp-endpoint"},
		{[]string{"--otlp-endpoint", "collector"}, "want HOST:PORT"},
		{[]string{"--otlp-endpoint", ":4317"}, "with a host and a port"},
		{[]string{"--otlp-endpoint", "collector:0"}, "with a host and a port"},
		{[]string{"--otlp-endpoint", "collector:otlp"}, "with a host and a port"},
		{[]string{"--otlp-endpoint", "http://collector:4317"}, "want HOST:PORT"},
	} {
		_, err := parseConfig(append([]string{"--node-id", "n"}, tc.args...), env(nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseConfig(%q) = %v, want error containing %q", tc.args, err, tc.want)
		}
	}
	c, err := parseConfig([]string{"--node-id", "n"}, env(nil), io.Discard)
	if err != nil || c.OTLPEndpoint != "" || c.TraceSample != defaultTraceSample {
		t.Fatalf("defaults: %v, endpoint %q, sample %v", err, c.OTLPEndpoint, c.TraceSample)
	}
	tr, err := startTracing(context.Background(), c, slog.New(slog.DiscardHandler))
	if err != nil || tr != nil || tr.serverOptions() != nil {
		t.Fatalf("tracing without --otlp-endpoint: %v %v", tr, err)
	}
	c, err = parseConfig([]string{"--node-id", "n"}, env(map[string]string{
		"RAFTQ_OTLP_ENDPOINT": "collector.example:4317", "RAFTQ_OTLP_INSECURE": "true", "RAFTQ_TRACE_SAMPLE": "0.25"}), io.Discard)
	if err != nil || c.OTLPEndpoint != "collector.example:4317" || !c.OTLPInsecure || c.TraceSample != 0.25 {
		t.Fatalf("from the environment: %v %+v", err, c)
	}
}

// A receiver that accepts connections and never answers cannot hold a
// stopping node past its shutdown timeout.
func TestTracingShutdownBounded(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	held := make(chan net.Conn, 16)
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			held <- conn // open and silent until the test ends
		}
	}()
	defer func() {
		for {
			select {
			case conn := <-held:
				_ = conn.Close()
			default:
				return
			}
		}
	}()
	c, err := parseConfig([]string{"--node-id", "n", "--otlp-endpoint", lis.Addr().String(), "--otlp-insecure", "--trace-sample", "1"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := startTracing(context.Background(), c, slog.New(slog.DiscardHandler))
	if err != nil || tr == nil {
		t.Fatalf("startTracing: %v", err)
	}
	_, span := tr.tp.Tracer("test").Start(context.Background(), "pending")
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	began := time.Now()
	err = tr.shutdown(ctx, slog.New(slog.DiscardHandler))
	if took := time.Since(began); took > 3*time.Second {
		t.Fatalf("shutdown took %v past a 500ms bound", took)
	}
	if err == nil {
		t.Fatal("a span that could not be exported was reported as flushed")
	}
	if again := tr.shutdown(context.Background(), slog.New(slog.DiscardHandler)); again != err {
		t.Fatalf("second shutdown = %v, want the first's %v", again, err)
	}
}
