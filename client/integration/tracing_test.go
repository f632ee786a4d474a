package integration

import (
	"context"
	"encoding/hex"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/internal/testcluster"
	"github.com/raftq/raftq/wire"
	"github.com/raftq/raftq/worker"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// otlpReceiver is an OTLP/gRPC trace receiver, as a collector serves it,
// keeping every span it is sent with its resource's service.name.
type otlpReceiver struct {
	collectorpb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []receivedSpan
}

type receivedSpan struct {
	service string
	span    *tracepb.Span
}

func (r *otlpReceiver) Export(_ context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		var service string
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, receivedSpan{service: service, span: s})
			}
		}
	}
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

func (r *otlpReceiver) received() []receivedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]receivedSpan(nil), r.spans...)
}

func startReceiver(t *testing.T) (*otlpReceiver, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{}
	gs := grpc.NewServer()
	collectorpb.RegisterTraceServiceServer(gs, r)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return r, lis.Addr().String()
}

func recorder(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}

func traceparentOf(sc trace.SpanContext) string {
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
}

func stubAttr(s tracetest.SpanStub, key string) attribute.Value {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// Trace context goes from a client's send, through the message stored on a
// real node, to the worker's handler; the node, started with
// --otlp-endpoint, exports its spans of the same calls to an OTLP receiver
// under the client's trace ids, flushing them when it stops.
func TestTracingEndToEnd(t *testing.T) {
	rcv, endpoint := startReceiver(t)
	// --trace-sample 0: the node traces only calls whose caller sampled a
	// trace, so every span it exports must belong to a client's trace.
	c := testcluster.Start(t, nodeBin, testcluster.Options{Nodes: 1, Shards: 1,
		Args: []string{"--otlp-endpoint", endpoint, "--otlp-insecure", "--trace-sample", "0"}})
	ctx := ctxT(t, 90*time.Second)
	plain := mustDial(t, c)
	ptp, pexp := recorder(t)
	// Coalescing off: each Send is its own call, under its own span.
	producer := mustDial(t, c, client.WithTracing(ptp, nil), client.WithSendCoalescing(0))
	if _, err := plain.CreateQueue(ctx, "traced", client.QueueOptions{}); err != nil {
		t.Fatal(err)
	}

	sendSpan := func(id string) tracetest.SpanStub {
		t.Helper()
		for _, s := range pexp.GetSpans() {
			if s.Name == "send traced" && s.SpanKind == trace.SpanKindProducer && stubAttr(s, "messaging.message.id").AsString() == id {
				return s
			}
		}
		t.Fatalf("no producer span for %s", id)
		return tracetest.SpanStub{}
	}
	stored := func(id string) map[string]string {
		t.Helper()
		info, err := plain.GetMessage(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return info.Attributes
	}

	// Send: the stored message carries the producer span's context, next
	// to the caller's own attributes.
	one, err := producer.Send(ctx, "traced", []byte("one"), client.Attributes(map[string]string{"k": "v"}))
	if err != nil {
		t.Fatal(err)
	}
	oneSpan := sendSpan(one.ID)
	if a := stored(one.ID); a[wire.AttrTraceParent] != traceparentOf(oneSpan.SpanContext) || a["k"] != "v" || len(a) != 2 {
		t.Fatalf("stored attributes %v, want k and traceparent %s", a, traceparentOf(oneSpan.SpanContext))
	}
	// SendAsync: its own span, ended when the outcome is known.
	async, err := producer.SendAsync(ctx, "traced", []byte("async")).Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a := stored(async.ID); a[wire.AttrTraceParent] != traceparentOf(sendSpan(async.ID).SpanContext) {
		t.Fatalf("async send stored %v", a)
	}
	// SendBatch: one span for the call, its context in every message.
	batch, err := producer.SendBatch(ctx, "traced", []client.Outgoing{{Body: []byte("b1")}, {Body: []byte("b2")}})
	if err != nil {
		t.Fatal(err)
	}
	var batchSpan tracetest.SpanStub
	for _, s := range pexp.GetSpans() {
		if s.Name == "send traced" && stubAttr(s, "messaging.batch.message_count").AsInt64() == 2 {
			batchSpan = s
		}
	}
	for _, r := range batch {
		if a := stored(r.ID); a[wire.AttrTraceParent] != traceparentOf(batchSpan.SpanContext) {
			t.Fatalf("batch message %s stored %v, want the batch span %s", r.ID, a, traceparentOf(batchSpan.SpanContext))
		}
	}
	// Tracing off: nothing added.
	off, err := plain.Send(ctx, "traced", []byte("off"), client.Attributes(map[string]string{"k": "v"}))
	if err != nil {
		t.Fatal(err)
	}
	if a := stored(off.ID); len(a) != 1 {
		t.Fatalf("untraced send stored %v", a)
	}
	// A message whose attributes are at the count limit is sent without
	// trace context rather than refused, and its span says so.
	full := map[string]string{}
	for i := range wire.MaxAttributes {
		full["a"+strconv.Itoa(i)] = "v"
	}
	atLimit, err := producer.Send(ctx, "traced", []byte("full"), client.Attributes(full))
	if err != nil {
		t.Fatalf("a send at the attribute limit failed with tracing on: %v", err)
	}
	if a := stored(atLimit.ID); len(a) != wire.MaxAttributes || a[wire.AttrTraceParent] != "" {
		t.Fatalf("send at the limit stored %d attributes", len(a))
	}
	if !stubAttr(sendSpan(atLimit.ID), "raftq.trace_context_dropped").AsBool() {
		t.Error("the span of a send at the limit does not say its context was dropped")
	}
	// A traceparent attribute that is not W3C trace context is an
	// ordinary attribute to the node: stored as sent, never a refusal
	// (senders used the name before tracing existed); the handler's span
	// below starts a trace of its own for it.
	bad, err := plain.Send(ctx, "traced", []byte("bad"), client.Attributes(map[string]string{wire.AttrTraceParent: "garbage"}))
	if err != nil {
		t.Fatalf("a send with a malformed traceparent: %v", err)
	}
	if a := stored(bad.ID); a[wire.AttrTraceParent] != "garbage" {
		t.Fatalf("malformed traceparent stored as %v", a)
	}

	// The worker's handler spans continue the producers' traces, and its
	// acks carry the handler's span to the node.
	ctp, cexp := recorder(t)
	consumer := mustDial(t, c, client.WithTracing(ctp, nil))
	const total = 7
	settled := make(chan worker.Outcome, total)
	w, err := worker.New(consumer, "traced", worker.Options{Wait: 200 * time.Millisecond, Tracing: worker.Tracing{Provider: ctp},
		Logger: slog.New(slog.DiscardHandler), Hooks: worker.Hooks{Settled: func(_ *worker.Message, s worker.Settlement) { settled <- s.Outcome }}})
	if err != nil {
		t.Fatal(err)
	}
	w.Default(func(context.Context, *worker.Message) error { return nil })
	wctx, stopWorker := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- w.Run(wctx) }()
	for range total {
		select {
		case o := <-settled:
			if o != worker.Acked {
				t.Fatalf("outcome %v", o)
			}
		case <-ctx.Done():
			t.Fatal("messages not all handled")
		}
	}
	stopWorker()
	if err := <-runErr; err != nil {
		t.Fatalf("worker: %v", err)
	}
	process := map[string]tracetest.SpanStub{} // by message id
	for _, s := range cexp.GetSpans() {
		if s.Name == "process traced" {
			process[stubAttr(s, "messaging.message.id").AsString()] = s
		}
	}
	p := process[one.ID]
	if p.SpanContext.TraceID() != oneSpan.SpanContext.TraceID() || p.Parent.SpanID() != oneSpan.SpanContext.SpanID() {
		t.Fatalf("handler span %v parent %v, want a child of the send span %v", p.SpanContext, p.Parent, oneSpan.SpanContext)
	}
	for _, id := range []string{off.ID, bad.ID} {
		s, ok := process[id]
		if !ok || s.Parent.IsValid() {
			t.Errorf("message %s: handler span found %v, parent %v; want a span without a parent", id, ok, s.Parent)
		}
	}

	// A copy the node makes (a redrive to another queue) carries the
	// original's trace context.
	dead, err := producer.Send(ctx, "traced", []byte("dead"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := plain.Receive(ctx, "traced", client.ReceiveOptions{Max: 1, Wait: 5 * time.Second})
	if err != nil || len(got) != 1 || got[0].ID != dead.ID {
		t.Fatalf("receive the message to dead-letter: %v %v", got, err)
	}
	if err := plain.DeadLetter(ctx, got[0].Receipt, "to be redriven"); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.CreateQueue(ctx, "traced-copy", client.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	if n, err := plain.Redrive(ctx, "traced", client.RedriveOptions{IDs: []string{dead.ID}, Target: "traced-copy"}); err != nil || n != 1 {
		t.Fatalf("redrive: %d %v", n, err)
	}
	copied, err := plain.Receive(ctx, "traced-copy", client.ReceiveOptions{Max: 1, Wait: 5 * time.Second})
	if err != nil || len(copied) != 1 {
		t.Fatalf("receive the redriven copy: %v %v", copied, err)
	}
	if tp := copied[0].Attributes[wire.AttrTraceParent]; tp != traceparentOf(sendSpan(dead.ID).SpanContext) {
		t.Fatalf("redriven copy carries traceparent %q, want the original send's", tp)
	}

	// The node flushes its spans on stop, within --shutdown-timeout.
	if err := c.Stop(0, 30*time.Second); err != nil {
		c.DumpLogs()
		t.Fatalf("stop: %v", err)
	}
	clientTraces := map[string]bool{}
	for _, s := range append(pexp.GetSpans(), cexp.GetSpans()...) {
		clientTraces[s.SpanContext.TraceID().String()] = true
	}
	find := func(name string, trace trace.SpanContext) *tracepb.Span {
		for _, r := range rcv.received() {
			if r.span.GetName() == name && hex.EncodeToString(r.span.GetTraceId()) == trace.TraceID().String() &&
				hex.EncodeToString(r.span.GetParentSpanId()) == trace.SpanID().String() {
				return r.span
			}
		}
		return nil
	}
	var names []string
	for _, r := range rcv.received() {
		names = append(names, r.span.GetName())
		if r.service != "raftq-node" {
			t.Errorf("span %q from service %q", r.span.GetName(), r.service)
		}
		if !clientTraces[hex.EncodeToString(r.span.GetTraceId())] {
			t.Errorf("node span %q in trace %x that no client started (--trace-sample 0)", r.span.GetName(), r.span.GetTraceId())
		}
	}
	if s := find("send traced", oneSpan.SpanContext); s == nil || s.GetKind() != tracepb.Span_SPAN_KIND_SERVER {
		t.Fatalf("no server span \"send traced\" under the client's send span %s; node spans: %v", oneSpan.SpanContext.SpanID(), names)
	}
	if find("send traced", batchSpan.SpanContext) == nil {
		t.Errorf("no server span for the batch; node spans: %v", names)
	}
	if find("ack", p.SpanContext) == nil {
		t.Errorf("no server span \"ack\" under the handler's span; node spans: %v", names)
	}
}
