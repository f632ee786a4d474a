package client

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/raftq/raftq/wire"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

func tracedContext(t *testing.T, state string) context.Context {
	t.Helper()
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ts, err := trace.ParseTraceState(state)
	if err != nil {
		t.Fatal(err)
	}
	return trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts}))
}

// The trace attributes count against the message's attribute limits: what
// does not fit is left out, tracestate first, and the send goes on.
func TestInjectKeepsWithinAttributeLimits(t *testing.T) {
	tr := &tracing{prop: propagation.TraceContext{}}
	ctx := tracedContext(t, "vendor=abc")
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	fill := func(n, valueLen int) map[string]string {
		m := map[string]string{}
		for i := range n {
			m["k"+strconv.Itoa(i)] = strings.Repeat("v", valueLen)
		}
		return m
	}
	size := func(m map[string]string) int {
		n := 0
		for k, v := range m {
			n += len(k) + len(v)
		}
		return n
	}

	caller := map[string]string{"k": "v", wire.AttrTraceParent: "stale"}
	out, all := tr.inject(ctx, caller)
	if !all || out[wire.AttrTraceParent] != parent || out[wire.AttrTraceState] != "vendor=abc" || out["k"] != "v" {
		t.Fatalf("room for both: %v (all %v)", out, all)
	}
	if caller[wire.AttrTraceParent] != "stale" || len(caller) != 2 {
		t.Fatalf("the caller's map was changed: %v", caller)
	}

	// One attribute slot left: traceparent only.
	out, all = tr.inject(ctx, fill(wire.MaxAttributes-1, 1))
	if all || out[wire.AttrTraceParent] != parent || len(out) != wire.MaxAttributes {
		t.Fatalf("one slot left: %d attributes, all %v", len(out), all)
	}
	if err := wire.CheckTraceAttributes(out); err != nil {
		t.Fatal(err)
	}

	// No slot left: nothing added, the caller's map goes as it was.
	in := fill(wire.MaxAttributes, 1)
	out, all = tr.inject(ctx, in)
	if all || len(out) != wire.MaxAttributes || out[wire.AttrTraceParent] != "" {
		t.Fatalf("no slot left: %d attributes, all %v", len(out), all)
	}

	// Bytes: room for traceparent's 66 but not tracestate's 20 more.
	in = fill(1, wire.MaxAttributesBytes-2-len(wire.AttrTraceParent)-len(parent)-5)
	out, all = tr.inject(ctx, in)
	if all || out[wire.AttrTraceParent] != parent || out[wire.AttrTraceState] != "" || size(out) > wire.MaxAttributesBytes {
		t.Fatalf("bytes for traceparent only: size %d, all %v, %v", size(out), all, out[wire.AttrTraceState])
	}

	// A tracestate past the 512 bytes a worker takes (several vendors'
	// entries from an upstream caller) is left out; the parent goes.
	var members []string
	for i := range 3 {
		members = append(members, "v"+strconv.Itoa(i)+"="+strings.Repeat("x", 200))
	}
	out, all = tr.inject(tracedContext(t, strings.Join(members, ",")), map[string]string{"k": "v"})
	if all || out[wire.AttrTraceParent] != parent || out[wire.AttrTraceState] != "" {
		t.Fatalf("long tracestate: all %v, traceparent %q, tracestate %d bytes", all, out[wire.AttrTraceParent], len(out[wire.AttrTraceState]))
	}
	if err := wire.CheckTraceAttributes(out); err != nil {
		t.Fatal(err)
	}

	// No span: nothing to carry.
	in = map[string]string{"k": "v"}
	if out, all = tr.inject(context.Background(), in); !all || len(out) != 1 {
		t.Fatalf("no span: %v", out)
	}
}

func TestWithTracingRefusesNilProvider(t *testing.T) {
	_, err := Dial(context.Background(), []string{"127.0.0.1:1"}, WithTracing(nil, nil))
	if err == nil || !strings.Contains(err.Error(), "nil tracer provider") {
		t.Fatalf("Dial = %v, want the nil provider refused", err)
	}
}
