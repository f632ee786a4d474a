package client

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/raftq/raftq/client/clienttest"
)

func TestAckWithResultAndWait(t *testing.T) {
	s := clienttest.NewServer(t)
	c := mustDial(t, []string{s.Addr})
	ctx := testCtx(t)
	if _, err := c.CreateQueue(ctx, "jobs", QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	sent, err := c.Send(ctx, "jobs", []byte("work"))
	if err != nil {
		t.Fatal(err)
	}
	type waited struct {
		m   *MessageInfo
		err error
	}
	done := make(chan waited, 1)
	go func() {
		m, err := c.Wait(ctx, "jobs", sent.ID)
		done <- waited{m, err}
	}()
	got, err := c.Receive(ctx, "jobs", ReceiveOptions{Max: 1, Wait: 2 * time.Second})
	if err != nil || len(got) != 1 {
		t.Fatalf("receive: %v %v", got, err)
	}
	if err := c.AckWithResult(ctx, got[0].Receipt, []byte("42")); err != nil {
		t.Fatal(err)
	}
	w := <-done
	if w.err != nil || !w.m.Finished() || w.m.State != "acked" || string(w.m.Result) != "42" {
		t.Fatalf("Wait = %+v, %v", w.m, w.err)
	}
}

func TestWaitReturnsLastStateAtDeadline(t *testing.T) {
	s := clienttest.NewServer(t)
	c := mustDial(t, []string{s.Addr})
	ctx := testCtx(t)
	if _, err := c.CreateQueue(ctx, "jobs", QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateQueue(ctx, "other", QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	sent, err := c.Send(ctx, "jobs", []byte("work"))
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	m, err := c.Wait(wctx, "jobs", sent.ID)
	if !errors.Is(err, context.DeadlineExceeded) || m == nil || m.State != "ready" || m.Finished() {
		t.Fatalf("Wait on an unfinished job = %+v, %v", m, err)
	}
	if _, err := c.Wait(ctx, "other", sent.ID); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Wait with another queue's id = %v, want ErrInvalid", err)
	}
}

func TestAckResultLimit(t *testing.T) {
	s := clienttest.NewServer(t)
	c := mustDial(t, []string{s.Addr})
	err := c.AckWithResult(testCtx(t), "not-even-parsed", bytes.Repeat([]byte("x"), MaxResultBytes+1))
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("oversized result = %v, want ErrInvalid", err)
	}
}
