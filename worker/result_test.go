package worker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
)

// A handler's result rides on its ack: Wait returns it. A result over the
// limit is refused at SetResult, and a failed handler's result is dropped.
func TestSetResultRidesOnTheAck(t *testing.T) {
	f := newFixture(t)
	ids := f.mustSend(t, 2)
	settled, hooks := outcomeLog()
	w := mustNew(t, f.c, "q", fast(Options{Hooks: hooks, Concurrency: 1}))
	w.Default(func(ctx context.Context, m *Message) error {
		if err := m.SetResult(make([]byte, client.MaxResultBytes+1)); !errors.Is(err, client.ErrInvalid) {
			t.Errorf("oversized result: %v, want ErrInvalid", err)
		}
		buf := []byte("first")
		if err := m.SetResult(buf); err != nil {
			t.Errorf("SetResult: %v", err)
		}
		copy(buf, "XXXXX") // the worker kept its own copy
		if err := m.SetResult([]byte("done: " + string(m.Body))); err != nil {
			t.Errorf("SetResult: %v", err)
		}
		if string(m.Body) == "m1" {
			return errors.New("boom")
		}
		return nil
	})
	start(t, w)
	for range 2 {
		nextSettlement(t, settled)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := f.c.Wait(ctx, "q", ids[0])
	if err != nil || string(m.Result) != "done: m0" {
		t.Fatalf("Wait = %+v, %v; want the result the handler set last", m, err)
	}
	got, err := f.c.GetMessage(ctx, ids[1])
	if err != nil || got.State == "acked" || len(got.Result) != 0 || !strings.Contains(got.LastError, "boom") {
		t.Fatalf("failed job = %+v, %v; want nacked with no result", got, err)
	}
	var outside Message
	if err := outside.SetResult([]byte("x")); err == nil {
		t.Fatal("SetResult on a message no worker delivered succeeded")
	}
}
