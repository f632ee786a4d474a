package server

import (
	"context"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/wire"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TracerName is the instrumentation scope of the node's spans.
const TracerName = "github.com/raftq/raftq/server"

// maxSendLinks bounds the links a send span takes from its messages'
// trace attributes (the SDK drops links past its own limit, 128 by
// default, but building them costs before that).
const maxSendLinks = 128

// tracedOps names the message calls that get a server span, by full
// method, with the operation their span is named after.
var tracedOps = map[string]string{
	"/raftq.v1.Messages/Send":        "send",
	"/raftq.v1.Messages/SendBatch":   "send",
	"/raftq.v1.Messages/Receive":     "receive",
	"/raftq.v1.Messages/Ack":         "ack",
	"/raftq.v1.Messages/Nack":        "nack",
	"/raftq.v1.Messages/DeadLetter":  "dead_letter",
	"/raftq.v1.Messages/Snooze":      "snooze",
	"/raftq.v1.Messages/ExtendLease": "extend",
}

// TraceInterceptor returns a unary interceptor that runs the message
// calls (send, receive, ack, nack, dead-letter, snooze, extend) under a
// server span continuing the trace context the caller put in the call's
// gRPC metadata (client.WithTracing does), with the queue and the number
// of messages as attributes. A send span also links to the trace context
// each message carries in its attributes, which differs from the call's
// when the client coalesced sends of several traces into one call. Other
// calls pass untouched. A node without --otlp-endpoint installs none
// (docs/tracing.md).
func TraceInterceptor(tp trace.TracerProvider, prop propagation.TextMapPropagator) grpc.UnaryServerInterceptor {
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	tr := tp.Tracer(TracerName)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		op, ok := tracedOps[info.FullMethod]
		if !ok {
			return handler(ctx, req)
		}
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			ctx = prop.Extract(ctx, mdCarrier(md))
		}
		queue, attrs, links := describeRequest(prop, req)
		name := op
		if queue != "" {
			name += " " + queue
		}
		attrs = append(attrs,
			attribute.String("rpc.system", "grpc"),
			attribute.String("rpc.method", info.FullMethod),
			attribute.String("messaging.system", "raftq"),
			attribute.String("messaging.operation.name", op),
		)
		ctx, span := tr.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...), trace.WithLinks(links...))
		defer span.End()
		resp, err := handler(ctx, req)
		if err != nil {
			st, _ := status.FromError(err)
			span.SetAttributes(attribute.String("rpc.grpc.status_code", st.Code().String()))
			span.SetStatus(otelcodes.Error, st.Message())
			return resp, err
		}
		if r, ok := resp.(*raftqv1.ReceiveResponse); ok {
			span.SetAttributes(attribute.Int("messaging.batch.message_count", len(r.GetMessages())))
		}
		return resp, nil
	}
}

// describeRequest gives a traced request's queue, attributes and, for a
// send, links to its messages' producers.
func describeRequest(prop propagation.TextMapPropagator, req any) (string, []attribute.KeyValue, []trace.Link) {
	var (
		queue string
		attrs []attribute.KeyValue
		links []trace.Link
	)
	link := func(a map[string]string) {
		if len(links) >= maxSendLinks || a[wire.AttrTraceParent] == "" {
			return
		}
		if sc := trace.SpanContextFromContext(prop.Extract(context.Background(), propagation.MapCarrier(a))); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	receipt := func(r string) {
		if rc, err := wire.ParseReceipt(r); err == nil {
			attrs = append(attrs, attribute.String("messaging.message.id", wire.MessageID{Shard: rc.Shard, ID: rc.ID}.String()))
		}
	}
	switch r := req.(type) {
	case *raftqv1.SendRequest:
		queue = r.GetQueue()
		attrs = append(attrs, attribute.Int("messaging.batch.message_count", 1))
		link(r.GetAttributes())
	case *raftqv1.SendBatchRequest:
		queue = r.GetQueue()
		attrs = append(attrs, attribute.Int("messaging.batch.message_count", len(r.GetMessages())))
		for _, m := range r.GetMessages() {
			link(m.GetAttributes())
		}
	case *raftqv1.ReceiveRequest:
		queue = r.GetQueue()
		attrs = append(attrs, attribute.Int("raftq.receive.max_messages", int(r.GetMaxMessages())))
	case *raftqv1.AckRequest:
		attrs = append(attrs, attribute.Int("messaging.batch.message_count", len(r.GetReceipts())))
		if len(r.GetReceipts()) == 1 {
			receipt(r.GetReceipts()[0])
		}
	case interface{ GetReceipt() string }: // nack, dead-letter, snooze, extend
		receipt(r.GetReceipt())
	}
	if queue != "" {
		attrs = append(attrs, attribute.String("messaging.destination.name", queue))
	}
	return queue, attrs, links
}

// mdCarrier reads trace context from incoming gRPC metadata.
type mdCarrier metadata.MD

func (m mdCarrier) Get(key string) string {
	if v := metadata.MD(m).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (m mdCarrier) Set(key, value string) { metadata.MD(m).Set(key, value) }

func (m mdCarrier) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}
