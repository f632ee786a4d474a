package worker

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/client/clienttest"
)

// outcomeLog collects Hooks.Settled reports.
func outcomeLog() (chan Settlement, Hooks) {
	ch := make(chan Settlement, 64)
	return ch, Hooks{Settled: func(_ *Message, s Settlement) { ch <- s }}
}

func nextSettlement(t *testing.T, ch chan Settlement) Settlement {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(15 * time.Second):
		t.Fatal("no settlement")
		return Settlement{}
	}
}

func TestTimeoutCancelsTheHandlerAndNacks(t *testing.T) {
	f := newFixtureWith(t, client.QueueOptions{BackoffBase: time.Minute})
	f.mustSend(t, 1)
	settled, hooks := outcomeLog()
	var cause atomic.Value
	w := mustNew(t, f.c, "q", fast(Options{Timeout: 200 * time.Millisecond, Hooks: hooks}))
	w.Default(func(ctx context.Context, m *Message) error {
		<-ctx.Done()
		cause.Store(context.Cause(ctx))
		return ctx.Err()
	})
	start(t, w)
	s := nextSettlement(t, settled)
	if s.Outcome != TimedOut || !errors.Is(s.Err, ErrTimeout) {
		t.Fatalf("settlement %+v, want timed out", s)
	}
	if s.Took < 190*time.Millisecond || s.Took > 5*time.Second {
		t.Fatalf("handler ran %v with a 200ms timeout", s.Took)
	}
	if c, _ := cause.Load().(error); !errors.Is(c, ErrTimeout) {
		t.Fatalf("handler context cause %v, want ErrTimeout", c)
	}
	nacks := f.s.Calls("Nack")
	if len(nacks) != 1 || !strings.HasPrefix(nacks[0].Error, "timeout") || nacks[0].HasDelay {
		t.Fatalf("nacks %+v, want one with the queue's backoff and an error beginning \"timeout\"", nacks)
	}
	if f.s.Count("q", clienttest.Delayed) != 1 {
		t.Fatal("the timed-out job is not waiting out its backoff")
	}
}

// A handler that ignores its context does not hold its job: the job is
// nacked half the grace past the deadline, and the handler's late result
// is dropped.
func TestTimeoutNacksAHungHandler(t *testing.T) {
	f := newFixtureWith(t, client.QueueOptions{BackoffBase: time.Minute})
	f.mustSend(t, 1)
	settled, hooks := outcomeLog()
	release := make(chan struct{})
	returned := make(chan struct{})
	w := mustNew(t, f.c, "q", fast(Options{Timeout: 100 * time.Millisecond, TimeoutGrace: 400 * time.Millisecond, Hooks: hooks}))
	w.Default(func(ctx context.Context, m *Message) error {
		defer close(returned)
		<-release // ignores ctx
		return nil
	})
	stop := start(t, w)
	began := time.Now()
	s := nextSettlement(t, settled)
	if s.Outcome != TimedOut || !errors.Is(s.Err, ErrTimeout) {
		t.Fatalf("settlement %+v, want timed out", s)
	}
	if took := time.Since(began); took < 250*time.Millisecond {
		t.Fatalf("nacked %v after the start, before half the grace past the deadline", took)
	}
	nacks := f.s.Calls("Nack")
	if len(nacks) != 1 || !strings.HasPrefix(nacks[0].Error, "timeout: the handler ran past its 100ms deadline") {
		t.Fatalf("nacks %+v", nacks)
	}
	close(release)
	<-returned
	if err := stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if n := len(f.s.Calls("Ack")); n != 0 {
		t.Fatalf("the hung handler's late success was acked %d times", n)
	}
	select {
	case s := <-settled:
		t.Fatalf("a second settlement %+v", s)
	default:
	}
}

// TimeoutFor overrides Timeout per message, and no extension, the
// handler's own included, keeps a lease past the deadline and its grace.
func TestTimeoutForCapsTheLease(t *testing.T) {
	f := newFixture(t)
	f.mustSend(t, 1, client.Type("slow"))
	f.mustSend(t, 1, client.Type("free"))
	type seen struct {
		typ      string
		deadline time.Time
		err      error
		began    time.Time
	}
	got := make(chan seen, 2)
	w := mustNew(t, f.c, "q", fast(Options{
		Concurrency:  1,
		Timeout:      time.Hour,
		TimeoutGrace: time.Second,
		TimeoutFor: func(m *Message) time.Duration {
			if m.Type == "slow" {
				return 500 * time.Millisecond
			}
			return 0
		},
	}))
	w.Default(func(ctx context.Context, m *Message) error {
		began := time.Now()
		dl, err := m.ExtendLease(ctx, time.Hour)
		_, hasDeadline := ctx.Deadline()
		if hasDeadline != (m.Type == "slow") {
			t.Errorf("type %s: handler context deadline set = %v", m.Type, hasDeadline)
		}
		got <- seen{m.Type, dl, err, began}
		return nil
	})
	start(t, w)
	for range 2 {
		s := <-got
		if s.err != nil {
			t.Fatalf("type %s: ExtendLease: %v", s.typ, s.err)
		}
		switch s.typ {
		case "slow":
			if limit := s.began.Add(500*time.Millisecond + time.Second + 100*time.Millisecond); s.deadline.After(limit) {
				t.Fatalf("lease of a 500ms job extended to %v, past its deadline and grace %v", s.deadline, limit)
			}
		case "free":
			if s.deadline.Before(s.began.Add(59 * time.Minute)) {
				t.Fatalf("lease of a job with no timeout extended only to %v", s.deadline)
			}
		}
	}
}

// A job on its only allowed receive snoozes, and is delivered again on
// its first receive instead of being dead-lettered.
func TestSnoozeKeepsTheAttempt(t *testing.T) {
	f := newFixtureWith(t, client.QueueOptions{MaxReceives: 1})
	ids := f.mustSend(t, 1)
	settled, hooks := outcomeLog()
	var calls atomic.Int32
	counts := make(chan uint32, 2)
	w := mustNew(t, f.c, "q", fast(Options{Hooks: hooks}))
	w.Default(func(ctx context.Context, m *Message) error {
		counts <- m.ReceiveCount
		if calls.Add(1) == 1 {
			return Snooze(50 * time.Millisecond)
		}
		return nil
	})
	stop := start(t, w)
	if s := nextSettlement(t, settled); s.Outcome != Snoozed {
		t.Fatalf("first settlement %+v, want snoozed", s)
	}
	if s := nextSettlement(t, settled); s.Outcome != Acked {
		t.Fatalf("second settlement %+v, want acked", s)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if a, b := <-counts, <-counts; a != 1 || b != 1 {
		t.Fatalf("receive counts %d then %d, want 1 both times", a, b)
	}
	sn := f.s.Calls("Snooze")
	if len(sn) != 1 || sn[0].Delay != 50*time.Millisecond {
		t.Fatalf("snooze calls %+v", sn)
	}
	if n := len(f.s.Calls("Nack")); n != 0 {
		t.Fatalf("%d nacks for a snooze", n)
	}
	info, err := f.c.GetMessage(context.Background(), ids[0])
	if err != nil || info.State != "acked" {
		t.Fatalf("message %+v, %v: want acked", info, err)
	}
}

// A worker stopping while a healthy job sits on its last allowed receive
// hands it back without using up that receive: it is ready again, not
// dead-lettered (a nack, as releases were before, would kill it).
func TestShutdownReleaseDoesNotDeadLetterTheLastReceive(t *testing.T) {
	f := newFixtureWith(t, client.QueueOptions{MaxReceives: 1})
	ids := f.mustSend(t, 1)
	running := make(chan struct{})
	settled, hooks := outcomeLog()
	w := mustNew(t, f.c, "q", fast(Options{DrainTimeout: 100 * time.Millisecond, Hooks: hooks}))
	w.Default(func(ctx context.Context, m *Message) error {
		close(running)
		<-ctx.Done()
		return context.Cause(ctx)
	})
	stop := start(t, w)
	<-running
	if err := stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if s := nextSettlement(t, settled); s.Outcome != Released {
		t.Fatalf("settlement %+v, want released", s)
	}
	info, err := f.c.GetMessage(context.Background(), ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if info.State != "ready" || info.ReceiveCount != 0 {
		t.Fatalf("after shutdown: state %s, receive count %d; want ready with its receive given back", info.State, info.ReceiveCount)
	}
	ms, err := f.c.Receive(context.Background(), "q", client.ReceiveOptions{Max: 1})
	if err != nil || len(ms) != 1 || ms[0].ReceiveCount != 1 {
		t.Fatalf("redelivery %v, %v: want the job on its first receive", ms, err)
	}
}

// While a replica predates snooze (a rolling upgrade), the shutdown
// release nacks instead, so the job comes back at once rather than when
// its lease runs out.
func TestShutdownReleaseNacksDuringAnUpgrade(t *testing.T) {
	f := newFixture(t)
	ids := f.mustSend(t, 1)
	f.s.LagFormat("Snooze", 1)
	running := make(chan struct{})
	settled, hooks := outcomeLog()
	w := mustNew(t, f.c, "q", fast(Options{DrainTimeout: 100 * time.Millisecond, Visibility: time.Hour, Hooks: hooks}))
	w.Default(func(ctx context.Context, m *Message) error {
		close(running)
		<-ctx.Done()
		return context.Cause(ctx)
	})
	stop := start(t, w)
	<-running
	if err := stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if s := nextSettlement(t, settled); s.Outcome != Released || s.SettleErr != nil {
		t.Fatalf("settlement %+v, want released", s)
	}
	if n := len(f.s.Calls("Nack")); n != 1 {
		t.Fatalf("%d nacks, want the fallback's one", n)
	}
	info, err := f.c.GetMessage(context.Background(), ids[0])
	if err != nil || info.State != "ready" {
		t.Fatalf("after shutdown: %+v, %v; want ready now, not in an hour", info, err)
	}
}
