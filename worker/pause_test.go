package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftq/raftq/client/clienttest"
)

// A handler that finds its dependency down pauses the queue for every
// consumer and hands its job back; nothing more is delivered until the
// queue is resumed, and then the work goes on.
func TestHandlerPausesQueue(t *testing.T) {
	f := newFixture(t)
	w, err := New(f.c, "q", Options{Concurrency: 1, Wait: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	var down atomic.Bool
	down.Store(true)
	var calls atomic.Int32
	w.Default(func(ctx context.Context, m *Message) error {
		calls.Add(1)
		if down.Load() {
			if err := w.PauseQueue(ctx); err != nil {
				return err
			}
			return Retry(0, errors.New("database down"))
		}
		return nil
	})
	f.mustSend(t, 3)
	start(t, w)
	clienttest.WaitFor(t, "the queue paused", func() bool {
		st, err := f.c.Stats(context.Background(), "q")
		return err == nil && st.Paused && st.Ready == 3
	})
	before := calls.Load()
	time.Sleep(300 * time.Millisecond) // several long polls
	if got := calls.Load(); got != before {
		t.Fatalf("%d deliveries while the queue was paused", got-before)
	}
	down.Store(false)
	if err := w.ResumeQueue(context.Background()); err != nil {
		t.Fatal(err)
	}
	clienttest.WaitFor(t, "every job acked after the resume", func() bool { return f.s.Count("q", clienttest.Acked) == 3 })
}

func TestPauseQueueOfMissingQueue(t *testing.T) {
	f := newFixture(t)
	w, err := New(f.c, "nosuch", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.PauseQueue(context.Background()); err == nil {
		t.Fatal("pausing a missing queue succeeded")
	}
}
