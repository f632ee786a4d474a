package worker

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/wire"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func newRecorder(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}

func spanAttr(s tracetest.SpanStub, key string) attribute.Value {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// Each handler runs under a consumer span that is a child of the producer
// span of the send that made its message, and records how the message
// was settled.
func TestTracingHandlerSpanContinuesSend(t *testing.T) {
	f := newFixtureWith(t, client.QueueOptions{BackoffBase: time.Minute})
	ptp, pexp := newRecorder(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	producer, err := client.Dial(ctx, []string{f.s.Addr}, client.WithTracing(ptp, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()

	cases := map[string]struct {
		outcome Outcome
		failed  bool
	}{
		"ok":     {Acked, false},
		"fail":   {Nacked, true},
		"panic":  {Panicked, true},
		"poison": {DeadLettered, true},
		"slow":   {TimedOut, true},
		"snooze": {Snoozed, false},
	}
	sent := map[string]string{} // message id -> type
	for typ := range cases {
		r, err := producer.Send(ctx, "q", []byte(typ), client.Type(typ))
		if err != nil {
			t.Fatal(err)
		}
		sent[r.ID] = typ
	}

	ctp, cexp := newRecorder(t)
	settled := make(chan Settlement, len(cases)*2)
	handlerSpans := make(chan trace.SpanContext, len(cases)*2)
	w := mustNew(t, f.c, "q", fast(Options{
		Tracing: Tracing{Provider: ctp},
		TimeoutFor: func(m *Message) time.Duration {
			if m.Type == "slow" {
				return 50 * time.Millisecond
			}
			return 0
		},
		Hooks:  Hooks{Settled: func(_ *Message, s Settlement) { settled <- s }},
		Logger: slog.New(slog.DiscardHandler),
	}))
	w.Default(func(ctx context.Context, m *Message) error {
		handlerSpans <- trace.SpanContextFromContext(ctx)
		switch m.Type {
		case "fail":
			return errors.New("boom")
		case "panic":
			panic("kaboom")
		case "poison":
			return Poison(errors.New("bad json"))
		case "slow":
			<-ctx.Done()
			return ctx.Err()
		case "snooze":
			return Snooze(time.Hour)
		}
		return nil
	})
	stop := start(t, w)
	for range cases {
		select {
		case <-settled:
		case <-ctx.Done():
			t.Fatal("not every message was settled")
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}

	producers := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range pexp.GetSpans() {
		if s.Name == "send q" && s.SpanKind == trace.SpanKindProducer {
			producers[s.SpanContext.SpanID()] = s
		}
	}
	if len(producers) != len(cases) {
		t.Fatalf("%d producer spans, want %d", len(producers), len(cases))
	}
	var processed int
	for _, s := range cexp.GetSpans() {
		if s.Name != "process q" {
			continue
		}
		processed++
		id := spanAttr(s, "messaging.message.id").AsString()
		typ, ok := sent[id]
		if !ok {
			t.Fatalf("span for unknown message %q", id)
		}
		want := cases[typ]
		p, ok := producers[s.Parent.SpanID()]
		if !ok || s.SpanContext.TraceID() != p.SpanContext.TraceID() || !s.Parent.IsRemote() {
			t.Errorf("%s: span %v with parent %v is no child of a producer span", typ, s.SpanContext, s.Parent)
		} else if pid := spanAttr(p, "messaging.message.id").AsString(); pid != id {
			t.Errorf("%s: parent is the producer of %q, not of %q", typ, pid, id)
		}
		if s.SpanKind != trace.SpanKindConsumer {
			t.Errorf("%s: kind %v, want consumer", typ, s.SpanKind)
		}
		for key, v := range map[string]string{"messaging.system": "raftq", "messaging.destination.name": "q",
			"messaging.operation.type": "process", AttrType: typ, AttrOutcome: string(want.outcome)} {
			if got := spanAttr(s, key).AsString(); got != v {
				t.Errorf("%s: %s = %q, want %q", typ, key, got, v)
			}
		}
		if n := spanAttr(s, AttrAttempt).AsInt64(); n != 1 {
			t.Errorf("%s: attempt %d, want 1", typ, n)
		}
		if failed := s.Status.Code == codes.Error; failed != want.failed {
			t.Errorf("%s: status %v, want error %v", typ, s.Status, want.failed)
		}
	}
	if processed != len(cases) {
		t.Fatalf("%d process spans, want %d", processed, len(cases))
	}
	close(handlerSpans)
	for sc := range handlerSpans {
		if !sc.IsValid() {
			t.Fatal("a handler's context carries no span")
		}
	}
}

// Without Options.Tracing the worker starts no span, even for a message
// that carries trace context; with tracing off on the client, a send adds
// no attributes.
func TestTracingOff(t *testing.T) {
	f := newFixture(t)
	ptp, _ := newRecorder(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	producer, err := client.Dial(ctx, []string{f.s.Addr}, client.WithTracing(ptp, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	if _, err := producer.Send(ctx, "q", []byte("traced")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.Send(ctx, "q", []byte("plain"), client.Attributes(map[string]string{"k": "v"})); err != nil {
		t.Fatal(err)
	}
	got := make(chan *Message, 2)
	inSpan := make(chan bool, 2)
	w := mustNew(t, f.c, "q", fast(Options{}))
	w.Default(func(ctx context.Context, m *Message) error {
		inSpan <- trace.SpanContextFromContext(ctx).IsValid()
		got <- m
		return nil
	})
	start(t, w)
	for range 2 {
		var m *Message
		select {
		case m = <-got:
		case <-ctx.Done():
			t.Fatal("messages not handled")
		}
		if <-inSpan {
			t.Errorf("%s: handler ran in a span with tracing off", m.Body)
		}
		_, has := m.Attributes[wire.AttrTraceParent]
		switch string(m.Body) {
		case "traced":
			if !has {
				t.Error("the traced send carries no traceparent")
			}
		case "plain":
			if has || len(m.Attributes) != 1 {
				t.Errorf("an untraced send got attributes %v", m.Attributes)
			}
		}
	}
}
