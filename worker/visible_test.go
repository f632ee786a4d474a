package worker

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/client/clienttest"
)

// syncBuffer is a log destination safe for the worker's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A handler's error and a panic reach OnError and OnPanic, and the
// Settled hook tells them apart, with the error itself.
func TestHandlerFailuresReachHooks(t *testing.T) {
	f := newFixtureWith(t, client.QueueOptions{BackoffBase: time.Minute})
	f.mustSend(t, 1, client.Type("fails"))
	f.mustSend(t, 1, client.Type("panics"))
	boom := errors.New("boom")
	var (
		mu       sync.Mutex
		errs     []error
		panics   []any
		stacks   []string
		settled  = map[Outcome]Settlement{}
		finished = make(chan struct{}, 2)
	)
	w := mustNew(t, f.c, "q", fast(Options{
		OnError: func(_ context.Context, m *Message, err error) {
			mu.Lock()
			defer mu.Unlock()
			errs = append(errs, err)
		},
		OnPanic: func(_ context.Context, m *Message, v any, stack []byte) {
			mu.Lock()
			defer mu.Unlock()
			panics, stacks = append(panics, v), append(stacks, string(stack))
		},
		Hooks: Hooks{Settled: func(_ *Message, s Settlement) {
			mu.Lock()
			settled[s.Outcome] = s
			mu.Unlock()
			finished <- struct{}{}
		}},
	}))
	w.Register("fails", func(context.Context, *Message) error { return boom })
	w.Register("panics", func(context.Context, *Message) error { panic("kaboom") })
	stop := start(t, w)
	<-finished
	<-finished
	if err := stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) != 1 || !errors.Is(errs[0], boom) {
		t.Fatalf("OnError got %v, want boom once", errs)
	}
	if len(panics) != 1 || panics[0] != "kaboom" || !strings.Contains(stacks[0], "visible_test.go") {
		t.Fatalf("OnPanic got %v with stack %q, want kaboom and the panic site", panics, stacks)
	}
	var p *PanicError
	if s := settled[Panicked]; !errors.As(s.Err, &p) || p.Value != "kaboom" {
		t.Fatalf("Settled for the panic = %+v, want Panicked with a *PanicError", s)
	}
	if s := settled[Nacked]; !errors.Is(s.Err, boom) || s.SettleErr != nil {
		t.Fatalf("Settled for the error = %+v, want Nacked with boom", s)
	}
}

// Without OnError and OnPanic the worker's log says why a message failed.
func TestHandlerFailuresAreLogged(t *testing.T) {
	f := newFixtureWith(t, client.QueueOptions{BackoffBase: time.Minute})
	f.mustSend(t, 1, client.Type("fails"))
	f.mustSend(t, 1, client.Type("panics"))
	var log syncBuffer
	settled := make(chan struct{}, 2)
	w := mustNew(t, f.c, "q", fast(Options{
		Logger: slog.New(slog.NewTextHandler(&log, nil)),
		Hooks:  Hooks{Settled: func(*Message, Settlement) { settled <- struct{}{} }},
	}))
	w.Register("fails", func(context.Context, *Message) error { return errors.New("smtp 451") })
	w.Register("panics", func(context.Context, *Message) error { panic("nil map") })
	stop := start(t, w)
	<-settled
	<-settled
	_ = stop()
	out := log.String()
	for _, want := range []string{`level=WARN msg="raftq worker handler failed"`, `err="smtp 451"`,
		`level=ERROR msg="raftq worker handler panicked"`, `panic="nil map"`, "visible_test.go"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

// Middleware wraps every handler, the first given outermost, and sees
// each result.
func TestMiddlewareWrapsHandlers(t *testing.T) {
	f := newFixture(t)
	f.mustSend(t, 1, client.Type("a"))
	var (
		mu    sync.Mutex
		trace []string
	)
	note := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		trace = append(trace, s)
	}
	mw := func(name string) Middleware {
		return func(next Handler) Handler {
			return func(ctx context.Context, m *Message) error {
				note(name + ">")
				err := next(ctx, m)
				note("<" + name + " " + m.Type)
				return err
			}
		}
	}
	done := make(chan struct{}, 1)
	w := mustNew(t, f.c, "q", fast(Options{Hooks: Hooks{Settled: func(*Message, Settlement) { done <- struct{}{} }}}))
	w.Use(mw("outer"), mw("inner"))
	w.Register("a", func(context.Context, *Message) error { note("handler"); return nil })
	stop := start(t, w)
	<-done
	_ = stop()
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(trace, " "); got != "outer> inner> handler <inner a <outer a" {
		t.Fatalf("trace %q", got)
	}
}

// A handler that asks for a longer lease keeps it: the heartbeats that
// follow extend to the later deadline instead of cutting it back to
// Visibility.
func TestExtendLeaseIsKeptByHeartbeats(t *testing.T) {
	f := newFixture(t)
	ids := f.mustSend(t, 1)
	w := mustNew(t, f.c, "q", fast(Options{Visibility: 2 * time.Second, ExtendEvery: 100 * time.Millisecond}))
	checked := make(chan error, 1)
	w.Default(func(ctx context.Context, m *Message) error {
		if _, err := m.ExtendLease(ctx, time.Hour); err != nil {
			checked <- err
			return err
		}
		// Three heartbeats after the wish.
		before := len(f.s.Calls("ExtendLease"))
		clienttest.WaitFor(t, "heartbeats", func() bool { return len(f.s.Calls("ExtendLease")) >= before+3 })
		info, err := f.c.GetMessage(ctx, ids[0])
		if err == nil && time.Until(info.LeaseDeadline) < 50*time.Minute {
			err = errors.New("lease deadline " + time.Until(info.LeaseDeadline).String() + " from now, want about an hour")
		}
		checked <- err
		return nil
	})
	stop := start(t, w)
	if err := <-checked; err != nil {
		t.Fatal(err)
	}
	_ = stop()
	if _, err := (&Message{}).ExtendLease(context.Background(), time.Minute); err == nil {
		t.Fatal("ExtendLease of a message no worker delivered succeeded")
	}
}

// A client closed under a running worker ends Run with ErrClosed instead
// of a receive loop that retries forever.
func TestRunStopsWhenTheClientCloses(t *testing.T) {
	f := newFixture(t)
	w := mustNew(t, f.c, "q", Options{Wait: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	w.Default(func(context.Context, *Message) error { return nil })
	errc := make(chan error, 1)
	go func() { errc <- w.Run(context.Background()) }()
	// Whether Close finds a long poll out or comes before the first one,
	// Run must end.
	_ = f.c.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, client.ErrClosed) {
			t.Fatalf("Run after Close = %v, want client.ErrClosed", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run still running 30 s after its client closed")
	}
}
