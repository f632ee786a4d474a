package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/client/clienttest"
)

type fixture struct {
	s *clienttest.Server
	c *client.Client
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	return newFixtureWith(t, client.QueueOptions{})
}

// newFixtureWith creates queue "q" with opts.
func newFixtureWith(t *testing.T, opts client.QueueOptions) *fixture {
	t.Helper()
	s := clienttest.NewServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, []string{s.Addr})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.CreateQueue(ctx, "q", opts); err != nil {
		t.Fatalf("CreateQueue: %v", err)
	}
	return &fixture{s: s, c: c}
}

func (f *fixture) mustSend(t *testing.T, n int, opts ...client.SendOption) []string {
	t.Helper()
	var ids []string
	for i := range n {
		r, err := f.c.Send(context.Background(), "q", fmt.Appendf(nil, "m%d", i), opts...)
		if err != nil {
			t.Fatalf("Send: %v", err)
		}
		ids = append(ids, r.ID)
	}
	return ids
}

// start runs w in the background; the returned stop cancels it and returns
// Run's error.
func start(t *testing.T, w *Worker) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-errc:
			case <-time.After(15 * time.Second):
				t.Fatal("Run did not return after cancel")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func mustNew(t *testing.T, c *client.Client, queue string, o Options) *Worker {
	t.Helper()
	w, err := New(c, queue, o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return w
}

func fast(o Options) Options {
	if o.Wait == 0 {
		o.Wait = 100 * time.Millisecond
	}
	return o
}

func TestAckOnSuccess(t *testing.T) {
	f := newFixture(t)
	f.mustSend(t, 5)
	var seen sync.Map
	w := mustNew(t, f.c, "q", fast(Options{Concurrency: 2}))
	w.Default(func(ctx context.Context, m *Message) error {
		if m.ReceiveCount != 1 || m.LeaseEpoch == 0 || m.ID == "" || !strings.HasPrefix(string(m.Body), "m") {
			return fmt.Errorf("bad message %+v", m)
		}
		seen.Store(m.ID, true)
		return nil
	})
	stop := start(t, w)
	clienttest.WaitFor(t, "5 acks", func() bool { return f.s.Count("q", clienttest.Acked) == 5 })
	if err := stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if n := len(f.s.Calls("Nack")); n != 0 {
		t.Fatalf("%d nacks on success", n)
	}
}

func TestSettleByHandlerResult(t *testing.T) {
	for _, c := range []struct {
		name    string
		handler Handler
		method  string
		check   func(clienttest.Call) bool
		state   clienttest.State
	}{
		{"error nacks with text and queue backoff", func(context.Context, *Message) error { return errors.New("boom") },
			"Nack", func(c clienttest.Call) bool { return c.Error == "boom" && !c.HasDelay }, clienttest.Delayed},
		{"panic nacks with panic text and stack", func(context.Context, *Message) error { panic("kaboom") },
			"Nack", func(c clienttest.Call) bool {
				return strings.HasPrefix(c.Error, "panic: kaboom\n") && strings.Contains(c.Error, "goroutine")
			}, clienttest.Delayed},
		{"retry nacks with the delay", func(context.Context, *Message) error { return Retry(90*time.Second, errors.New("later")) },
			"Nack", func(c clienttest.Call) bool { return c.HasDelay && c.Delay == 90*time.Second && c.Error == "later" }, clienttest.Delayed},
		{"poison dead-letters", func(context.Context, *Message) error { return Poison(errors.New("bad json")) },
			"DeadLetter", func(c clienttest.Call) bool { return c.Error == "bad json" }, clienttest.Dead},
		{"wrapped ErrPoison dead-letters", func(context.Context, *Message) error { return fmt.Errorf("parse: %w", ErrPoison) },
			"DeadLetter", func(c clienttest.Call) bool { return c.Error == "parse: poison message" }, clienttest.Dead},
	} {
		t.Run(c.name, func(t *testing.T) {
			// A nacked message stays delayed for the queue's backoff; with the
			// fake's 1 s default a slow stop() would let the worker receive
			// and settle it again before the checks. A minute cannot elapse.
			f := newFixtureWith(t, client.QueueOptions{BackoffBase: time.Minute})
			f.mustSend(t, 1)
			outcomes := make(chan Outcome, 4)
			w := mustNew(t, f.c, "q", fast(Options{Hooks: Hooks{Settled: func(_ *Message, s Settlement) { outcomes <- s.Outcome }}}))
			w.Default(c.handler)
			stop := start(t, w)
			<-outcomes
			if err := stop(); err != nil {
				t.Fatalf("Run = %v", err)
			}
			calls := f.s.Calls(c.method)
			if len(calls) != 1 || !c.check(calls[0]) {
				t.Fatalf("%s calls = %+v", c.method, calls)
			}
			if n := len(f.s.Calls("Ack")); n != 0 {
				t.Fatalf("%d acks for a failed handler", n)
			}
			if f.s.Count("q", c.state) != 1 {
				t.Fatalf("message not in state %v", c.state)
			}
		})
	}
}

func TestDispatchByType(t *testing.T) {
	f := newFixture(t)
	f.mustSend(t, 1, client.Type("email"))
	f.mustSend(t, 1, client.Type("sms"))
	got := make(chan string, 2)
	w := mustNew(t, f.c, "q", fast(Options{}))
	w.Register("email", func(_ context.Context, m *Message) error { got <- "email:" + m.Type; return nil })
	stop := start(t, w)
	<-got
	clienttest.WaitFor(t, "the unhandled type nacked", func() bool { return len(f.s.Calls("Nack")) == 1 })
	_ = stop()
	if c := f.s.Calls("Nack")[0]; !strings.Contains(c.Error, `no handler registered for message type "sms"`) {
		t.Fatalf("nack error = %q", c.Error)
	}
}

// A handler that outlasts the lease it was given keeps it: the worker's
// heartbeat extends it. The handler does not sleep a guessed time: it
// returns once the lease it was first given has run out and the server
// has seen extensions, and asserts the lease is still held then (the
// server would otherwise have it expired, ready for another receive). A
// heartbeat may stall up to 3.8 s on a loaded machine before the lease is
// lost.
func TestLongHandlerKeepsLease(t *testing.T) {
	f := newFixture(t)
	f.mustSend(t, 1)
	w := mustNew(t, f.c, "q", fast(Options{Visibility: 4 * time.Second, ExtendEvery: 200 * time.Millisecond}))
	var handled atomic.Int32
	held := make(chan error, 1)
	w.Default(func(ctx context.Context, m *Message) error {
		handled.Add(1)
		deadline := time.Now().Add(30 * time.Second)
		for {
			// Read the state before the clock: a lease seen held at a
			// time past the first deadline was extended.
			leased := f.s.Count("q", clienttest.Leased) == 1
			now := time.Now()
			switch {
			case !leased:
				held <- fmt.Errorf("lease lost %v after the first lease's deadline, the handler still running (handler ctx: %v)",
					now.Sub(m.LeaseDeadline).Round(time.Millisecond), context.Cause(ctx))
				return nil
			case now.After(m.LeaseDeadline.Add(100*time.Millisecond)) && len(f.s.Calls("ExtendLease")) >= 3:
				held <- nil
				return nil
			case now.After(deadline):
				held <- fmt.Errorf("the first lease's deadline %v never passed", m.LeaseDeadline.Format(time.StampMilli))
				return nil
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	stop := start(t, w)
	select {
	case err := <-held:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("the handler never ran to its end (Run: %v)", stop())
	}
	clienttest.WaitFor(t, "the ack", func() bool { return f.s.Count("q", clienttest.Acked) == 1 })
	_ = stop()
	if handled.Load() != 1 {
		t.Fatalf("handled %d times: the lease expired and the message was redelivered", handled.Load())
	}
}

func TestStaleExtendCancelsHandler(t *testing.T) {
	f := newFixture(t)
	ids := f.mustSend(t, 1)
	f.s.StaleExtend(ids[0])
	cause := make(chan error, 1)
	outcomes := make(chan Outcome, 1)
	w := mustNew(t, f.c, "q", fast(Options{Visibility: time.Minute, ExtendEvery: 50 * time.Millisecond,
		Hooks: Hooks{Settled: func(_ *Message, s Settlement) { outcomes <- s.Outcome }}}))
	w.Default(func(ctx context.Context, m *Message) error {
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return nil // would ack, but the lease is gone
	})
	stop := start(t, w)
	if err := <-cause; !errors.Is(err, ErrLeaseLost) || !errors.Is(err, client.ErrStaleReceipt) {
		t.Fatalf("handler ctx cause = %v, want ErrLeaseLost wrapping ErrStaleReceipt", err)
	}
	if o := <-outcomes; o != LeaseLost {
		t.Fatalf("outcome = %v, want %v", o, LeaseLost)
	}
	_ = stop()
	if n := len(f.s.Calls("Ack")) + len(f.s.Calls("Nack")); n != 0 {
		t.Fatalf("%d settle calls after the lease was lost", n)
	}
}

func TestConcurrencyNeverExceeded(t *testing.T) {
	f := newFixture(t)
	const total, conc = 30, 3
	f.mustSend(t, total)
	var cur, peak, done, leasedOver atomic.Int32
	w := mustNew(t, f.c, "q", fast(Options{Concurrency: conc, Batch: 10}))
	w.Default(func(ctx context.Context, m *Message) error {
		// Leases run from receive to settle: the server must never see more
		// than conc of them either.
		if f.s.Count("q", clienttest.Leased) > conc {
			leasedOver.Add(1)
		}
		n := cur.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(10 * time.Millisecond)
		cur.Add(-1)
		done.Add(1)
		return nil
	})
	stop := start(t, w)
	clienttest.WaitFor(t, "all acked", func() bool { return f.s.Count("q", clienttest.Acked) == total })
	_ = stop()
	if p := peak.Load(); p > conc || p < 2 {
		t.Fatalf("peak concurrency %d, want 2..%d", p, conc)
	}
	if n := leasedOver.Load(); n > 0 {
		t.Fatalf("server saw more than %d leases %d times", conc, n)
	}
	if done.Load() != total {
		t.Fatalf("handled %d of %d", done.Load(), total)
	}
}

func TestGracefulDrain(t *testing.T) {
	f := newFixture(t)
	f.mustSend(t, 2)
	started := make(chan struct{}, 2)
	outcomes := make(chan Outcome, 2)
	// The first handler ends about 100 ms into a 3 s drain window: a
	// loaded machine would need to stall it 2.9 s to release it instead.
	w := mustNew(t, f.c, "q", fast(Options{Concurrency: 2, DrainTimeout: 3 * time.Second,
		Hooks: Hooks{Settled: func(_ *Message, s Settlement) { outcomes <- s.Outcome }}}))
	var first atomic.Bool
	w.Default(func(ctx context.Context, m *Message) error {
		started <- struct{}{}
		if first.CompareAndSwap(false, true) {
			time.Sleep(100 * time.Millisecond) // finishes inside the drain window
			return nil
		}
		<-ctx.Done() // only the drain timeout ends this one
		return context.Cause(ctx)
	})
	stop := start(t, w)
	<-started
	<-started
	began := time.Now()
	if err := stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	took := time.Since(began)
	// The drain timer starts after began, so a correct drain takes at least
	// 3 s; one that did not wait returns at once. The upper bound is the
	// drain plus the release call with room for a loaded machine.
	if took < 3*time.Second || took > 10*time.Second {
		t.Fatalf("shutdown took %v with a 3s drain timeout", took)
	}
	got := map[Outcome]int{<-outcomes: 1}
	got[<-outcomes]++
	if got[Acked] != 1 || got[Released] != 1 {
		t.Fatalf("outcomes %v, want one acked and one released", got)
	}
	if nacks := f.s.Calls("Nack"); len(nacks) != 0 {
		t.Fatalf("shutdown nacked %+v: a release must not use up an attempt", nacks)
	}
	snoozes := f.s.Calls("Snooze")
	if len(snoozes) != 1 || snoozes[0].Delay != 0 || snoozes[0].Error != ErrShutdown.Error() {
		t.Fatalf("release snoozes = %+v, want one with no delay and reason %q", snoozes, ErrShutdown)
	}
	if f.s.Count("q", clienttest.Ready) != 1 || f.s.Count("q", clienttest.Acked) != 1 {
		t.Fatal("released message is not ready again")
	}
	if n := len(f.s.Calls("Receive")); n == 0 {
		t.Fatal("no receives")
	}
}

func TestRunReportsMissingQueueAndBadOptions(t *testing.T) {
	f := newFixture(t)
	w := mustNew(t, f.c, "nope", fast(Options{}))
	w.Default(func(context.Context, *Message) error { return nil })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.Run(ctx); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("Run on a missing queue = %v, want ErrNotFound", err)
	}
	if err := w.Run(ctx); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("second Run = %v", err)
	}
	for _, o := range []Options{
		{Concurrency: -1},
		{Batch: 1001},
		{Visibility: time.Second, ExtendEvery: time.Second},
		{Wait: 21 * time.Second},
		{Visibility: 13 * time.Hour},
	} {
		// Refused when the worker is made, not first at Run, and matched
		// like every other invalid input.
		if w, err := New(f.c, "q", o); w != nil || !errors.Is(err, client.ErrInvalid) {
			t.Errorf("New with %+v = %v, %v; want nil and client.ErrInvalid", o, w, err)
		}
	}
}

func TestOptionDefaults(t *testing.T) {
	o, err := Options{Concurrency: 8, Visibility: 9 * time.Second}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if o.Batch != 8 || o.ExtendEvery != 3*time.Second || o.Wait != 20*time.Second || o.DrainTimeout != 30*time.Second || o.Consumer == "" {
		t.Fatalf("defaults = %+v", o)
	}
}

func TestErrorHelpers(t *testing.T) {
	base := errors.New("x")
	if p := Poison(base); !errors.Is(p, ErrPoison) || !errors.Is(p, base) || p.Error() != "x" {
		t.Fatalf("Poison(x) = %v", p)
	}
	if !errors.Is(Poison(nil), ErrPoison) {
		t.Fatal("Poison(nil) is not ErrPoison")
	}
	var r *RetryError
	if err := fmt.Errorf("wrapped: %w", Retry(-time.Second, base)); !errors.As(err, &r) || r.After != 0 || !errors.Is(err, base) {
		t.Fatalf("Retry = %v", err)
	}
	if s := stackHead([]byte("a\nb\nc\nd"), 2); s != "a\nb" {
		t.Fatalf("stackHead = %q", s)
	}
}
