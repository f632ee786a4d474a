package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/raftq/raftq/client/clienttest"
)

// One goroutine keeps many sends in flight; they leave together and each
// PendingSend answers with its own message's id.
func TestSendAsyncKeepsManyInFlightFromOneGoroutine(t *testing.T) {
	s := clienttest.NewServer(t)
	c := mustDial(t, []string{s.Addr})
	mustCreate(t, c, "q", QueueOptions{})
	release, first := stallCalls(t, s, c)

	const n = 100
	names := bodies("async", n)
	pending := make([]*PendingSend, n)
	for i, b := range names {
		pending[i] = c.SendAsync(testCtx(t), "q", []byte(b))
	}
	clienttest.WaitFor(t, "async sends to queue behind the busy calls", func() bool { return pendingSends(c) == n })
	release()

	ids := map[string]bool{}
	for i, p := range pending {
		res, err := p.Wait(testCtx(t))
		if err != nil {
			t.Fatalf("Wait(%s): %v", names[i], err)
		}
		if ids[res.ID] {
			t.Fatalf("id %s returned twice", res.ID)
		}
		ids[res.ID] = true
		m, err := c.GetMessage(testCtx(t), res.ID)
		if err != nil || string(m.Body) != names[i] {
			t.Fatalf("message %s holds %q (%v), sent %q", res.ID, m.Body, err, names[i])
		}
		// A second Wait gives the same answer.
		if again, err := p.Wait(testCtx(t)); err != nil || again != res {
			t.Fatalf("second Wait = %+v, %v; first %+v", again, err, res)
		}
	}
	for _, r := range first() {
		if r.err != nil {
			t.Fatalf("Send(%s): %v", r.body, r.err)
		}
	}
	if calls := len(s.Calls("SendBatch")); calls > c.streamCalls()+2 {
		t.Fatalf("%d SendBatch calls for %d sends: not coalesced", calls, c.streamCalls()+n)
	}
}

// A queued async send whose context ends is not sent, and its Wait says so
// once the stream looks at it, though nobody watches the context.
func TestSendAsyncCancelledWhileQueuedIsNotSent(t *testing.T) {
	s := clienttest.NewServer(t)
	c := mustDial(t, []string{s.Addr})
	mustCreate(t, c, "q", QueueOptions{})
	release, first := stallCalls(t, s, c)

	ctx, cancel := context.WithCancel(testCtx(t))
	p := c.SendAsync(ctx, "q", []byte("cancelled"))
	clienttest.WaitFor(t, "the send to queue", func() bool { return pendingSends(c) == 1 })
	cancel()
	release()
	wctx, wcancel := context.WithTimeout(testCtx(t), 10*time.Second)
	defer wcancel()
	if _, err := p.Wait(wctx); !errors.Is(err, context.Canceled) || !errors.Is(err, ErrNotSent) {
		t.Fatalf("cancelled queued async send = %v, want ErrNotSent and context.Canceled", err)
	}
	cancelledNeverSent(t, s, c, first)
}

// Wait's own context bounds the wait, not the send.
func TestSendAsyncWaitContextEndsOnlyTheWait(t *testing.T) {
	s := clienttest.NewServer(t)
	c := mustDial(t, []string{s.Addr})
	mustCreate(t, c, "q", QueueOptions{})
	release, first := stallCalls(t, s, c)

	p := c.SendAsync(testCtx(t), "q", []byte("slow"))
	// Another goroutine already waiting does not hold this Wait past its
	// own deadline.
	type waited struct {
		res SendResult
		err error
	}
	other := make(chan waited, 1)
	go func() {
		res, err := p.Wait(testCtx(t))
		other <- waited{res, err}
	}()
	short, cancel := context.WithTimeout(testCtx(t), 50*time.Millisecond)
	defer cancel()
	if _, err := p.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait past its deadline = %v, want context.DeadlineExceeded", err)
	}
	release()
	res, err := p.Wait(testCtx(t))
	if err != nil {
		t.Fatalf("Wait after the release: %v", err)
	}
	if o := <-other; o.err != nil || o.res != res {
		t.Fatalf("the other Wait = %+v, %v; want %+v", o.res, o.err, res)
	}
	if m, err := c.GetMessage(testCtx(t), res.ID); err != nil || string(m.Body) != "slow" {
		t.Fatalf("message %s holds %q (%v)", res.ID, m.Body, err)
	}
	first()
}

func TestSendAsyncErrors(t *testing.T) {
	s := clienttest.NewServer(t)
	c := mustDial(t, []string{s.Addr})
	mustCreate(t, c, "q", QueueOptions{})

	// Refused by the server, item by item, as Send would be.
	if _, err := c.SendAsync(testCtx(t), "q", []byte("x"), Priority(10)).Wait(testCtx(t)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("async send with priority 10 = %v, want ErrInvalid", err)
	}
	// Refused before it leaves (a negative delay).
	if _, err := c.SendAsync(testCtx(t), "q", []byte("x"), Delay(-time.Second)).Wait(testCtx(t)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("async send with a negative delay = %v, want ErrInvalid", err)
	}
	if n := len(s.Calls("Send")) + len(s.Calls("SendBatch")); n != 1 {
		t.Fatalf("%d send calls after two refused sends, want 1 (the first)", n)
	}
	// gRPC metadata needs a call of its own, as with Send.
	ctx := metadata.AppendToOutgoingContext(testCtx(t), "tenant", "a")
	if _, err := c.SendAsync(ctx, "q", []byte("x")).Wait(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if n := len(s.Calls("Send")); n != 1 {
		t.Fatalf("%d Send calls for the async send with metadata, want 1", n)
	}
}

// A send whose deadline passes after it left is never reported as not
// sent: the call may have committed it (or a retry under its dedup key
// did, and it succeeds).
func TestSendAsyncDeadlineAfterLeavingIsNotNotSent(t *testing.T) {
	s := clienttest.NewServer(t)
	c := mustDial(t, []string{s.Addr})
	mustCreate(t, c, "q", QueueOptions{})
	release := s.Stall("SendBatch")
	t.Cleanup(release)

	// The deadline must pass only after the send has left and the stall is
	// seen: a send still queued at its deadline is rightly ErrNotSent, so a
	// short deadline on a loaded machine fails the wait below. 5 s is far
	// above queue-to-server latency; the test takes that long.
	ctx, cancel := context.WithTimeout(testCtx(t), 5*time.Second)
	defer cancel()
	p := c.SendAsync(ctx, "q", []byte("late"))
	clienttest.WaitFor(t, "the call to reach the server", func() bool { return s.Stalled("SendBatch") == 1 })
	if _, err := p.Wait(testCtx(t)); errors.Is(err, ErrNotSent) {
		t.Fatalf("send cut short after it left = %v: it may have committed, so it must not say ErrNotSent", err)
	}
}
