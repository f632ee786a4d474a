package client

import (
	"context"
	"fmt"
	"maps"

	"github.com/raftq/raftq/wire"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// TracerName is the instrumentation scope of the client's and the worker's
// spans (docs/tracing.md).
const TracerName = "github.com/raftq/raftq"

// Attribute keys of raftq's spans beyond the OpenTelemetry messaging
// conventions' own (docs/tracing.md).
const (
	// AttrSystem is messaging.system's value on every raftq span.
	AttrSystem = "raftq"
	// attrTraceDropped marks a producer span whose context did not fit in
	// the message's attributes.
	attrTraceDropped = "raftq.trace_context_dropped"
)

// tracing is a client's OpenTelemetry set-up; a nil *tracing is off.
type tracing struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

// WithTracing turns on OpenTelemetry tracing with tp's tracer and prop's
// propagation (nil prop: W3C trace context). Each Send, SendAsync and
// SendBatch runs under a producer span "send QUEUE" whose context is
// written into every message's attributes (wire.AttrTraceParent,
// wire.AttrTraceState), where a worker with tracing picks it up; each
// Receive runs under a span "receive QUEUE" linked to its messages'
// producers; and every call carries the caller's span context in its gRPC
// metadata, so a node with tracing continues it. Off by default: without
// it the client creates no spans and adds no attributes or metadata.
// The trace attributes count against the message's attribute limits
// (wire.MaxAttributes, wire.MaxAttributesBytes): a message they would push
// past one is sent without them, and its span says so.
func WithTracing(tp trace.TracerProvider, prop propagation.TextMapPropagator) Option {
	return option(func(c *config) error {
		if tp == nil {
			return fmt.Errorf("WithTracing: nil tracer provider")
		}
		if prop == nil {
			prop = propagation.TraceContext{}
		}
		t := &tracing{tracer: tp.Tracer(TracerName), prop: prop}
		c.tracing = t
		c.dialOpts = append(c.dialOpts, grpc.WithChainUnaryInterceptor(t.unary))
		return nil
	})
}

// startSend starts the producer span of one send call of n messages.
func (t *tracing) startSend(ctx context.Context, queue string, n int) (context.Context, trace.Span) {
	attrs := []attribute.KeyValue{
		attribute.String("messaging.system", AttrSystem),
		attribute.String("messaging.destination.name", queue),
		attribute.String("messaging.operation.type", "send"),
		attribute.String("messaging.operation.name", "send"),
	}
	if n > 1 {
		attrs = append(attrs, attribute.Int("messaging.batch.message_count", n))
	}
	return t.tracer.Start(ctx, "send "+queue, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
}

// inject returns attrs with ctx's trace context added, in a new map (the
// caller's is not changed). Trace entries that would take the message past
// an attribute limit are left out, tracestate first: tracing must never
// make a valid send invalid.
func (t *tracing) inject(ctx context.Context, attrs map[string]string) (map[string]string, bool) {
	tc := propagation.MapCarrier{}
	t.prop.Inject(ctx, tc)
	if len(tc) == 0 {
		return attrs, true
	}
	out := make(map[string]string, len(attrs)+len(tc))
	maps.Copy(out, attrs)
	// The trace entries replace any the caller set: the span being sent is
	// the one a handler must continue.
	delete(out, wire.AttrTraceParent)
	delete(out, wire.AttrTraceState)
	n, size := len(out), 0
	for k, v := range out {
		size += len(k) + len(v)
	}
	fits := func(k, v string) bool {
		return n+1 <= wire.MaxAttributes && size+len(k)+len(v) <= wire.MaxAttributesBytes
	}
	all := true
	for _, k := range []string{wire.AttrTraceParent, wire.AttrTraceState} {
		v, ok := tc[k]
		if !ok {
			continue
		}
		// A value the workers would not take as W3C trace context (a
		// tracestate longer than 512 bytes from an upstream caller) is
		// left out like one that does not fit.
		ok = wire.CheckTraceAttributes(map[string]string{k: v}) == nil
		if k == wire.AttrTraceParent && (!ok || !fits(k, v)) {
			// Without a parent the state means nothing.
			return attrs, false
		}
		if !ok || !fits(k, v) {
			all = false
			continue
		}
		out[k] = v
		n, size = n+1, size+len(k)+len(v)
	}
	// A propagator other than W3C's may write keys of its own; they are
	// carried as ordinary attributes, within the same limits.
	for k, v := range tc {
		if k == wire.AttrTraceParent || k == wire.AttrTraceState {
			continue
		}
		if _, taken := out[k]; taken || !fits(k, v) {
			all = false
			continue
		}
		out[k] = v
		n, size = n+1, size+len(k)+len(v)
	}
	return out, all
}

// injectOutgoing applies inject to o on behalf of the span in ctx.
func (t *tracing) injectOutgoing(ctx context.Context, o *Outgoing) {
	attrs, all := t.inject(ctx, o.Attributes)
	o.Attributes = attrs
	if !all {
		trace.SpanFromContext(ctx).SetAttributes(attribute.Bool(attrTraceDropped, true))
	}
}

// end ends a span with err as its status.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// endOnOutcome ends span once the send behind ch has an outcome, passing
// the outcome on: SendAsync returns before that.
func endOnOutcome(span trace.Span, ch <-chan sendOutcome) <-chan sendOutcome {
	out := make(chan sendOutcome, 1)
	go func() {
		o := <-ch
		if o.err == nil {
			span.SetAttributes(attribute.String("messaging.message.id", o.res.ID))
		}
		endSpan(span, o.err)
		out <- o
	}()
	return out
}

// startReceive starts the span of one receive call.
func (t *tracing) startReceive(ctx context.Context, queue string) (context.Context, trace.Span) {
	// A pull is a client call in the messaging conventions; the consumer
	// span is the handler's (worker/tracing.go).
	return t.tracer.Start(ctx, "receive "+queue, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("messaging.system", AttrSystem),
		attribute.String("messaging.destination.name", queue),
		attribute.String("messaging.operation.type", "receive"),
		attribute.String("messaging.operation.name", "receive"),
	))
}

// endReceive links the receive span to the producer of each message it
// got, and ends it.
func (t *tracing) endReceive(span trace.Span, msgs []*Message, err error) {
	span.SetAttributes(attribute.Int("messaging.batch.message_count", len(msgs)))
	for _, m := range msgs {
		if sc := trace.SpanContextFromContext(t.prop.Extract(context.Background(), propagation.MapCarrier(m.Attributes))); sc.IsValid() {
			span.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attribute.String("messaging.message.id", m.ID)}})
		}
	}
	endSpan(span, err)
}

// unary writes the span context of each call's context into its gRPC
// metadata, so a node with tracing continues the caller's trace.
func (t *tracing) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if trace.SpanContextFromContext(ctx).IsValid() {
		md, _ := metadata.FromOutgoingContext(ctx)
		md = md.Copy()
		t.prop.Inject(ctx, metadataCarrier(md))
		ctx = metadata.NewOutgoingContext(ctx, md)
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// metadataCarrier is gRPC metadata as a propagation.TextMapCarrier.
type metadataCarrier metadata.MD

func (m metadataCarrier) Get(key string) string {
	if v := metadata.MD(m).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (m metadataCarrier) Set(key, value string) { metadata.MD(m).Set(key, value) }

func (m metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}
