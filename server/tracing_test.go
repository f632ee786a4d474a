package server

import (
	"context"
	"net"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/wire"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// stubMessages answers the calls the interceptor test makes; the
// interceptor, not the handler, is under test.
type stubMessages struct {
	raftqv1.UnimplementedMessagesServer
}

func (stubMessages) Send(context.Context, *raftqv1.SendRequest) (*raftqv1.SendResponse, error) {
	return &raftqv1.SendResponse{MessageId: "0-1"}, nil
}

func (stubMessages) SendBatch(_ context.Context, r *raftqv1.SendBatchRequest) (*raftqv1.SendBatchResponse, error) {
	return &raftqv1.SendBatchResponse{Results: make([]*raftqv1.SendResult, len(r.GetMessages()))}, nil
}

func (stubMessages) Receive(context.Context, *raftqv1.ReceiveRequest) (*raftqv1.ReceiveResponse, error) {
	return &raftqv1.ReceiveResponse{Messages: []*raftqv1.ReceivedMessage{{MessageId: "0-1"}, {MessageId: "0-2"}}}, nil
}

func (stubMessages) Ack(context.Context, *raftqv1.AckRequest) (*raftqv1.AckResponse, error) {
	return nil, status.Error(codes.FailedPrecondition, "stale receipt")
}

func (stubMessages) GetMessage(context.Context, *raftqv1.GetMessageRequest) (*raftqv1.MessageInfo, error) {
	return &raftqv1.MessageInfo{}, nil
}

func startTraced(t *testing.T) (raftqv1.MessagesClient, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(TraceInterceptor(tp, nil)))
	raftqv1.RegisterMessagesServer(gs, stubMessages{})
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return raftqv1.NewMessagesClient(cc), exp
}

func remoteParent(t *testing.T, traceID, spanID string) trace.SpanContext {
	t.Helper()
	tid, err := trace.TraceIDFromHex(traceID)
	if err != nil {
		t.Fatal(err)
	}
	sid, err := trace.SpanIDFromHex(spanID)
	if err != nil {
		t.Fatal(err)
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
}

// withParent puts sc into the call's metadata as a tracing client does.
func withParent(ctx context.Context, sc trace.SpanContext) context.Context {
	md := metadata.MD{}
	propagation.TraceContext{}.Inject(trace.ContextWithRemoteSpanContext(ctx, sc), mdCarrier(md))
	return metadata.NewOutgoingContext(ctx, md)
}

func attrOf(s tracetest.SpanStub, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func onlySpan(t *testing.T, exp *tracetest.InMemoryExporter) tracetest.SpanStub {
	t.Helper()
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("got %d spans, want 1: %v", len(spans), spans)
	}
	exp.Reset()
	return spans[0]
}

func TestTraceInterceptorContinuesCallersTrace(t *testing.T) {
	mc, exp := startTraced(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	parent := remoteParent(t, "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")

	// Send: child of the caller's span, named after the queue.
	if _, err := mc.Send(withParent(ctx, parent), &raftqv1.SendRequest{Queue: "orders", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	s := onlySpan(t, exp)
	if s.Name != "send orders" || s.SpanKind != trace.SpanKindServer {
		t.Fatalf("span %q kind %v, want \"send orders\" server", s.Name, s.SpanKind)
	}
	if s.SpanContext.TraceID() != parent.TraceID() || s.Parent.SpanID() != parent.SpanID() || !s.Parent.IsRemote() {
		t.Fatalf("span %v parent %v, want a child of %v", s.SpanContext, s.Parent, parent)
	}
	for key, want := range map[string]string{"messaging.system": "raftq", "messaging.destination.name": "orders", "rpc.method": "/raftq.v1.Messages/Send"} {
		if v, _ := attrOf(s, key); v.AsString() != want {
			t.Errorf("%s = %q, want %q", key, v.AsString(), want)
		}
	}

	// SendBatch of a coalesced call: the call's own parent, and a link to
	// each message's producer.
	other := remoteParent(t, "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")
	tp := func(sc trace.SpanContext) map[string]string {
		return map[string]string{wire.AttrTraceParent: "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"}
	}
	_, err := mc.SendBatch(withParent(ctx, parent), &raftqv1.SendBatchRequest{Queue: "orders", Messages: []*raftqv1.SendRequest{
		{Body: []byte("a"), Attributes: tp(parent)}, {Body: []byte("b"), Attributes: tp(other)}, {Body: []byte("c")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	s = onlySpan(t, exp)
	if n, _ := attrOf(s, "messaging.batch.message_count"); n.AsInt64() != 3 {
		t.Errorf("batch count %d, want 3", n.AsInt64())
	}
	if len(s.Links) != 2 || s.Links[0].SpanContext.SpanID() != parent.SpanID() || s.Links[1].SpanContext.TraceID() != other.TraceID() {
		t.Errorf("links %v, want the two messages' producers", s.Links)
	}

	// Receive without trace context: a root span, with the count found.
	if _, err := mc.Receive(ctx, &raftqv1.ReceiveRequest{Queue: "orders", MaxMessages: 5}); err != nil {
		t.Fatal(err)
	}
	s = onlySpan(t, exp)
	if s.Name != "receive orders" || s.Parent.IsValid() {
		t.Fatalf("span %q parent %v, want a root \"receive orders\"", s.Name, s.Parent)
	}
	if n, _ := attrOf(s, "messaging.batch.message_count"); n.AsInt64() != 2 {
		t.Errorf("received count %d, want 2", n.AsInt64())
	}

	// A failed ack: error status with the gRPC code.
	receipt := wire.Receipt{Shard: 3, ID: 0x1f, Epoch: 1, Term: 1}.String()
	if _, err := mc.Ack(withParent(ctx, parent), &raftqv1.AckRequest{Receipts: []string{receipt}}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("ack: %v", err)
	}
	s = onlySpan(t, exp)
	if s.Name != "ack" || s.Status.Code != otelcodes.Error || s.Parent.SpanID() != parent.SpanID() {
		t.Fatalf("span %q status %v parent %v, want an errored \"ack\" under the caller", s.Name, s.Status, s.Parent)
	}
	if v, _ := attrOf(s, "rpc.grpc.status_code"); v.AsString() != codes.FailedPrecondition.String() {
		t.Errorf("status code attribute %q", v.AsString())
	}
	if v, _ := attrOf(s, "messaging.message.id"); v.AsString() != "3-1f" {
		t.Errorf("message id %q, want 3-1f from the receipt", v.AsString())
	}

	// Calls other than the message calls are not traced.
	if _, err := mc.GetMessage(withParent(ctx, parent), &raftqv1.GetMessageRequest{MessageId: "0-1"}); err != nil {
		t.Fatal(err)
	}
	if spans := exp.GetSpans(); len(spans) != 0 {
		t.Fatalf("GetMessage made spans: %v", spans)
	}
}

// The reserved trace attributes count against the replicated log's
// attribute limits, which the client reads from wire.
func TestTraceAttributeLimitsMatchFSM(t *testing.T) {
	if wire.MaxAttributes != fsm.MaxAttributes || wire.MaxAttributesBytes != fsm.MaxAttributesBytes {
		t.Fatalf("wire limits %d/%d, fsm %d/%d", wire.MaxAttributes, wire.MaxAttributesBytes, fsm.MaxAttributes, fsm.MaxAttributesBytes)
	}
}

// Trace attributes are ordinary attributes to the node: a malformed one is
// taken as sent (a worker starts a fresh trace for it), so sends that used
// the names before tracing existed keep working.
func TestSendKeepsMalformedTraceContext(t *testing.T) {
	s := &Server{}
	for _, tp := range []string{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "not-a-trace", ""} {
		m, err := s.newMessage(nil, &raftqv1.SendRequest{Queue: "q", Attributes: map[string]string{wire.AttrTraceParent: tp}})
		if err != nil {
			t.Fatalf("traceparent %q refused: %v", tp, err)
		}
		if got := m.GetAttributes()[wire.AttrTraceParent]; got != tp {
			t.Fatalf("traceparent %q stored as %q", tp, got)
		}
	}
}
