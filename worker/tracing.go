package worker

import (
	"context"

	"github.com/raftq/raftq/client"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Tracing runs each handler under an OpenTelemetry span "process QUEUE"
// (kind consumer) that continues the trace of the send that made the
// message, read from its trace attributes (docs/tracing.md). Off while
// Provider is nil: then the worker creates no spans and reads no
// attributes.
type Tracing struct {
	Provider trace.TracerProvider
	// Propagator reads the message's trace context (nil: W3C trace
	// context, what client.WithTracing writes by default).
	Propagator propagation.TextMapPropagator
}

// Span attributes of a handler's span beyond the messaging conventions'.
const (
	// AttrAttempt is the delivery's receive count: 1 on the first.
	AttrAttempt = "raftq.attempt"
	// AttrOutcome is how the message was settled: an Outcome.
	AttrOutcome = "raftq.outcome"
	// AttrType is the message's type, which picked its handler.
	AttrType = "raftq.message.type"
)

// tracer is a run's tracing set-up; nil is off.
type tracer struct {
	t     trace.Tracer
	prop  propagation.TextMapPropagator
	queue string
}

func newTracer(o Tracing, queue string) *tracer {
	if o.Provider == nil {
		return nil
	}
	prop := o.Propagator
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	return &tracer{t: o.Provider.Tracer(client.TracerName), prop: prop, queue: queue}
}

// startJob starts j's span as a child of the producer span its message
// names (or of ctx's span when it names none) and returns ctx with it;
// the handler, its middleware and the settle call run under it.
func (t *tracer) startJob(ctx context.Context, j *job) context.Context {
	if t == nil {
		return ctx
	}
	m := j.m
	if pc := trace.SpanContextFromContext(t.prop.Extract(context.Background(), propagation.MapCarrier(m.Attributes))); pc.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, pc)
	}
	attrs := []attribute.KeyValue{
		attribute.String("messaging.system", client.AttrSystem),
		attribute.String("messaging.destination.name", t.queue),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.operation.name", "process"),
		attribute.String("messaging.message.id", m.ID),
		attribute.Int64(AttrAttempt, int64(m.ReceiveCount)),
	}
	if m.Type != "" {
		attrs = append(attrs, attribute.String(AttrType, m.Type))
	}
	if m.Group != "" {
		attrs = append(attrs, attribute.String("messaging.message.conversation_id", m.Group))
	}
	ctx, j.span = t.t.Start(ctx, "process "+t.queue, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
	return ctx
}

// endJob records how j was settled and ends its span. Outcomes that mean
// the work failed (an error, a panic, a timeout, a dead-letter, a lost
// lease, a settle that did not land) set the span's status to error; a
// snooze, a release at shutdown and an open circuit are no failure.
func endJob(j *job, s Settlement) {
	if j == nil || j.span == nil {
		return
	}
	j.span.SetAttributes(attribute.String(AttrOutcome, string(s.Outcome)))
	switch s.Outcome {
	case Acked, Snoozed, Released, CircuitOpen:
	default:
		err := s.Err
		if s.SettleErr != nil {
			err = s.SettleErr
		}
		desc := string(s.Outcome)
		if err != nil {
			j.span.RecordError(err)
			desc += ": " + err.Error()
		}
		j.span.SetStatus(codes.Error, desc)
	}
	j.span.End()
}

// spanContext returns ctx carrying j's span, so a settle call made from
// the run's own context still continues the job's trace.
func (j *job) spanContext(ctx context.Context) context.Context {
	if j.span == nil {
		return ctx
	}
	return trace.ContextWithSpan(ctx, j.span)
}
