package client

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/client/clienttest"
	"github.com/raftq/raftq/wire"
)

func TestSnoozeValidation(t *testing.T) {
	s := clienttest.NewServer(t)
	c := mustDial(t, []string{s.Addr})
	ctx := testCtx(t)
	rcpt := wire.Receipt{Shard: 0, ID: 1, Epoch: 1}.String()
	for name, err := range map[string]error{
		"bad receipt":     c.Snooze(ctx, "nope", SnoozeOptions{}),
		"negative delay":  c.Snooze(ctx, rcpt, SnoozeOptions{Delay: -time.Millisecond}),
		"delay past max":  c.Snooze(ctx, rcpt, SnoozeOptions{Delay: MaxDelay + time.Millisecond}),
		"reason too long": c.Snooze(ctx, rcpt, SnoozeOptions{Reason: strings.Repeat("r", MaxSnoozeReason+1)}),
	} {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if calls := s.Calls("Snooze"); len(calls) != 0 {
		t.Fatalf("invalid snoozes reached the server: %+v", calls)
	}
}

func TestSnoozeHandsBackWithoutAnAttempt(t *testing.T) {
	s := clienttest.NewServer(t)
	c := mustDial(t, []string{s.Addr})
	ctx := testCtx(t)
	if _, err := c.CreateQueue(ctx, "q", QueueOptions{MaxReceives: 1}); err != nil {
		t.Fatal(err)
	}
	sent, err := c.Send(ctx, "q", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	ms, err := c.Receive(ctx, "q", ReceiveOptions{Max: 1})
	if err != nil || len(ms) != 1 {
		t.Fatalf("receive: %v %v", ms, err)
	}
	if err := c.Snooze(ctx, ms[0].Receipt, SnoozeOptions{Delay: time.Second, Reason: "later"}); err != nil {
		t.Fatalf("snooze: %v", err)
	}
	info, err := c.GetMessage(ctx, sent.ID)
	if err != nil || info.State != "delayed" || info.ReceiveCount != 0 {
		t.Fatalf("after snooze: %+v %v, want delayed with receive count 0", info, err)
	}
	if err := c.Snooze(ctx, ms[0].Receipt, SnoozeOptions{}); !errors.Is(err, ErrStaleReceipt) {
		t.Fatalf("second snooze with the same receipt: %v, want ErrStaleReceipt", err)
	}
}
