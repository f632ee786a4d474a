package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftq/raftq/client/clienttest"
)

func TestSendHold_RefusesUntilTheRetryTime(t *testing.T) {
	var h sendHolds
	k := holdKey{queue: "jobs", shard: 0}
	t0 := time.Unix(1000, 0)
	if _, held := h.check(k, t0); held {
		t.Fatal("held before any refusal")
	}
	h.note(k, "shard 0 is overloaded", 200*time.Millisecond, t0)

	err, held := h.check(k, t0.Add(50*time.Millisecond))
	if !held {
		t.Fatal("not held within the retry time")
	}
	if !errors.Is(err, ErrExhausted) || !err.Held || err.Code != codes.ResourceExhausted {
		t.Fatalf("held error: %#v", err)
	}
	// 150 ms left, spread up to a quarter further.
	if err.RetryAfter < 150*time.Millisecond || err.RetryAfter > 150*time.Millisecond*5/4+time.Nanosecond {
		t.Fatalf("retry after %v, want 150-187.5 ms", err.RetryAfter)
	}
	if !strings.Contains(err.Msg, "shard 0 is overloaded") || !strings.Contains(err.Msg, `"jobs"`) {
		t.Fatalf("message %q should repeat the node's and name the queue", err.Msg)
	}
	if d, ok := RetryAfter(fmt.Errorf("send to %q: %w", "jobs", err)); !ok || d != err.RetryAfter {
		t.Fatalf("RetryAfter of a wrapped held error: %v %v", d, ok)
	}
	// Other queues and shards are not held.
	for _, other := range []holdKey{{queue: "jobs", shard: 1}, {queue: "mail", shard: 0}} {
		if _, held := h.check(other, t0.Add(50*time.Millisecond)); held {
			t.Fatalf("%v held by a refusal of %v", other, k)
		}
	}
}

func TestSendHold_ThrottlesAfterTheHold(t *testing.T) {
	var h sendHolds
	k := holdKey{queue: "jobs", shard: 0}
	t0 := time.Unix(1000, 0)
	h.note(k, "overloaded", 100*time.Millisecond, t0)
	// 100 sends made in the hold, none taken: past it, the share refused
	// is (101 - 0) / 102, so nearly every send is still answered here.
	for i := range 100 {
		if _, held := h.check(k, t0.Add(time.Duration(i)*time.Millisecond/2)); !held {
			t.Fatalf("send %d not held", i)
		}
	}
	refused := 0
	for i := range 100 {
		if err, held := h.check(k, t0.Add(110*time.Millisecond)); held {
			refused++
			if !strings.Contains(err.Msg, "throttled") || err.RetryAfter < 50*time.Millisecond {
				t.Fatalf("throttle refusal %d: %q, retry %v", i, err.Msg, err.RetryAfter)
			}
		}
	}
	if refused < 90 {
		t.Fatalf("throttle refused %d of 100 sends with none taken, want nearly all", refused)
	}
}

func TestSendHold_TakenSendsOpenIt(t *testing.T) {
	var h sendHolds
	k := holdKey{queue: "jobs", shard: 0}
	t0 := time.Unix(1000, 0)
	h.note(k, "overloaded", time.Second, t0)
	// A send that left before the refusal and was taken since says
	// nothing of the node's queue now.
	h.taken(k, t0.Add(-time.Millisecond), t0.Add(10*time.Millisecond))
	if _, held := h.check(k, t0.Add(20*time.Millisecond)); !held {
		t.Fatal("a send that left before the refusal ended the hold")
	}
	// One that left after it ends the hold...
	h.taken(k, t0.Add(30*time.Millisecond), t0.Add(40*time.Millisecond))
	// ...and as the node takes what is made (twice, here), the throttle
	// refuses nothing and the queue is forgotten.
	now := t0.Add(50 * time.Millisecond)
	for i := range 40 {
		now = now.Add(10 * time.Millisecond)
		if _, held := h.check(k, now); held && i > 30 {
			t.Fatalf("send %d refused by the client while the node takes every send", i)
		}
		h.taken(k, now, now)
		h.taken(k, now, now)
	}
	if h.n.Load() != 0 {
		t.Fatalf("%d queues still remembered once the node took every send", h.n.Load())
	}
}

func TestSendHold_RenewedByTheNodesNextRefusal(t *testing.T) {
	var h sendHolds
	k := holdKey{queue: "jobs", shard: 0}
	t0 := time.Unix(1000, 0)
	h.note(k, "overloaded", 100*time.Millisecond, t0)
	h.note(k, "memory near its budget", 300*time.Millisecond, t0.Add(50*time.Millisecond))
	err, held := h.check(k, t0.Add(200*time.Millisecond))
	if !held || !strings.Contains(err.Msg, "memory near its budget") {
		t.Fatalf("the later refusal should hold until 350 ms with its words: %v %v", held, err)
	}
}

func TestSendHold_Bounded(t *testing.T) {
	var h sendHolds
	t0 := time.Unix(1000, 0)
	for i := range maxHolds {
		h.note(holdKey{queue: fmt.Sprint("q", i)}, "full", time.Second, t0)
	}
	// Every entry holds: a new queue is not remembered.
	extra := holdKey{queue: "extra"}
	h.note(extra, "full", time.Second, t0)
	if _, held := h.check(extra, t0); held || int(h.n.Load()) != maxHolds {
		t.Fatalf("past %d live holds: extra held %v, %d remembered", maxHolds, held, h.n.Load())
	}
	// Once they are over, a new refusal makes room for itself.
	later := t0.Add(2 * time.Second)
	h.note(extra, "full", time.Second, later)
	if _, held := h.check(extra, later); !held || h.n.Load() != 1 {
		t.Fatalf("after the holds ended: extra held %v, %d remembered", held, h.n.Load())
	}
}

func TestSendHold_NoteItems(t *testing.T) {
	var h sendHolds
	k := holdKey{queue: "jobs", shard: 0}
	t0 := time.Unix(1000, 0)
	refused := func(ms int) error {
		return &Error{Code: codes.ResourceExhausted, Msg: fmt.Sprint("quota, retry in ", ms), RetryAfter: time.Duration(ms) * time.Millisecond}
	}
	if h.noteItems(k, []error{refused(100), nil}, t0) {
		t.Fatal("a batch of which an item went in held the queue")
	}
	if h.noteItems(k, []error{refused(100), &Error{Code: codes.InvalidArgument, Msg: "bad"}}, t0) {
		t.Fatal("a batch with an item refused for another reason held the queue")
	}
	if !h.noteItems(k, []error{refused(300), refused(100)}, t0) {
		t.Fatal("a batch refused whole did not hold the queue")
	}
	// Past it the throttle may still refuse (nothing was taken), but
	// the hold is over.
	if err, held := h.check(k, t0.Add(150*time.Millisecond)); held && !strings.Contains(err.Msg, "throttled") {
		t.Fatalf("held past the shortest retry time of the batch: %v", err)
	}
}

// Once the node takes sends again, the throttle opens within one to two
// seconds, at any rate: what gets through grows e-fold every 0.6 window.
// The refusals are random; in 60 runs it took at most 2.3 s.
func TestSendHold_ThrottleOpensWithinSeconds(t *testing.T) {
	for _, perSecond := range []int{100, 1000, 10000} {
		var h sendHolds
		k := holdKey{queue: "jobs", shard: 0}
		t0 := time.Unix(1000, 0)
		h.note(k, "overloaded", 200*time.Millisecond, t0)
		step := time.Second / time.Duration(perSecond)
		refusedAfter, open := 0, time.Duration(0)
		for now := t0; now.Before(t0.Add(5 * time.Second)); now = now.Add(step) {
			if _, held := h.check(k, now); held {
				if !now.Before(t0.Add(200 * time.Millisecond)) {
					refusedAfter++
				}
				continue
			}
			h.taken(k, now, now)
			if h.n.Load() == 0 {
				open = now.Sub(t0)
				break
			}
		}
		if open == 0 || open > 3500*time.Millisecond {
			t.Fatalf("%d sends/s: the throttle was still refusing %v after a 200 ms hold (%d refused past it)", perSecond, open, refusedAfter)
		}
		t.Logf("%d sends/s: open %v after the refusal, %d refused past the hold", perSecond, open, refusedAfter)
	}
}

// Against a node that refuses every send, a flood through the hold puts
// a few sends a second on the wire, not its rate.
func TestSendHold_FloodMostlyAnsweredHere(t *testing.T) {
	var h sendHolds
	k := holdKey{queue: "jobs", shard: 0}
	t0 := time.Unix(1000, 0)
	sent, made := 0, 0
	for now := t0; now.Before(t0.Add(5 * time.Second)); now = now.Add(100 * time.Microsecond) {
		made++
		if _, held := h.check(k, now); held {
			continue
		}
		sent++
		h.note(k, "overloaded", 200*time.Millisecond, now)
	}
	if sent > made/100 {
		t.Fatalf("%d of %d sends reached a node that refused them all, want under 1 %%", sent, made)
	}
}

// A send whose attempt may have been applied is retried at a node even
// while its queue is held: only the node's answer (its dedup) settles the
// outcome; a hold would report a refusal for a message that may be in.
func TestSendHold_NotForARetryOfUnknownOutcome(t *testing.T) {
	s := clienttest.NewServer(t)
	c := mustDial(t, []string{s.Addr}, fastRetry(3))
	calls := 0
	err := c.invoke(testCtx(t), callSpec{shard: 0, safe: true, sendTo: "q"}, func(ctx context.Context, cc *grpc.ClientConn, _ ...grpc.CallOption) error {
		calls++
		if calls == 1 {
			// Another caller's refusal holds the queue meanwhile, and
			// this attempt's answer is lost.
			c.holds.note(holdKey{queue: "q", shard: 0}, "overloaded", time.Minute, time.Now())
			return status.Error(codes.Unavailable, "connection reset")
		}
		return nil
	})
	if err != nil || calls != 2 {
		t.Fatalf("retry after an unknown outcome: err %v after %d calls, want it made at the node", err, calls)
	}
	// A fresh send is held.
	err = c.invoke(testCtx(t), callSpec{shard: 0, safe: true, sendTo: "q"}, func(context.Context, *grpc.ClientConn, ...grpc.CallOption) error {
		t.Fatal("a send left while its queue is held")
		return nil
	})
	var e *Error
	if !errors.As(err, &e) || !e.Held {
		t.Fatalf("fresh send: %v, want held", err)
	}
}

// A coalesced send whose attempt left it unknown and whose later attempts
// were refused (by the node's send queue, then held) ends unknown, not
// refused, and its retries all reach the node: a refusal comes before the
// node looks up the dedup key, so it cannot settle the first attempt.
func TestSendHold_CoalescedUnknownStaysUnknown(t *testing.T) {
	s := clienttest.NewServer(t)
	cl := mustDial(t, []string{s.Addr}, fastRetry(4))
	mustCreate(t, cl, "q", QueueOptions{})
	s.FailItems(1, codes.Unavailable)
	s.ExhaustItems(9, 5*time.Millisecond)
	before := len(s.Calls("SendBatch"))
	_, err := cl.Send(testCtx(t), "q", []byte("x"))
	if !errors.Is(err, ErrOutcomeUnknown) || !errors.Is(err, ErrExhausted) {
		t.Fatalf("send unknown, then refused: %v, want ErrOutcomeUnknown wrapping the refusal", err)
	}
	if n := len(s.Calls("SendBatch")) - before; n != 4 {
		t.Fatalf("%d of the 4 attempts reached the node, want every one: none may be held", n)
	}
}
