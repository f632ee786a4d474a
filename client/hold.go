package client

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A node that refuses a queue's sends with a retry time (a quota, a full
// send queue, its memory or disk guard) means "not before then". The
// client keeps that word, per queue and shard (docs/client.md, "The send
// hold"):
//
//   - Hold: until the retry time passes it answers further sends itself,
//     with the node's refusal and the time left, instead of putting their
//     bodies on the wire for the node to read and refuse again.
//   - Throttle: then, while the node takes fewer than half the sends made
//     to the queue (attempts, the held ones included) in the last
//     throttleWindow, it refuses that share of them itself, at random:
//     max(0, (made - throttleK x taken) / (made + 1)), the client-side
//     throttling of Google's SRE book ("Handling Overload"). Without it,
//     every send made between the end of a hold and the node's next
//     refusal goes on the wire, and a flood refills the node's queue at
//     once.
//
// An application that sends faster than the cluster takes then costs the
// nodes about throttleK times the sends they take, not every byte it
// offers. A call with retries left waits either refusal out, as it would
// a node's. Only sends the client can place on a shard, without metadata
// of their own (a per-call credential could name another tenant's queue
// by the same name), are held; and never the retry of a send whose
// earlier attempt may have been applied, which only the node can settle.

const (
	// maxHolds bounds the queues remembered; past it, entries whose hold
	// is over go first, and while every entry holds new ones are not kept.
	maxHolds = 1024
	// throttleK is how many sends the client makes per send the node took
	// (the SRE book's K): above 1 so the node, not the client, finds out
	// when there is room again.
	throttleK = 2
	// throttleWindow, in throttleSlots slots, is how far back sends made
	// and taken are counted. Once the node takes sends again, what gets
	// through grows about e-fold every 0.6 window, from one send to the
	// sends made in half a window, so a window of 250 ms opens within
	// one to two seconds at any rate up to tens of thousands of sends a
	// second; it still counts a flood's calls by the hundred.
	throttleWindow = 250 * time.Millisecond
	throttleSlots  = 10
	throttleSlot   = throttleWindow / throttleSlots
	// throttleMinMade: below this many sends made in the window the
	// throttle refuses none. A sender this slow costs the node little,
	// and throttling it would spend a lone caller's retries on the
	// refusals its own earlier attempts earned.
	throttleMinMade = 10
)

// holdKey is a queue's sends to one shard (anyShard: a call the client
// could not place, sent to any node).
type holdKey struct {
	queue string
	shard int
}

type sendHolds struct {
	mu     sync.Mutex
	m      map[holdKey]*hold
	base   time.Time    // slot numbers count from it, on the monotonic clock
	purged time.Time    // when entries with nothing left to say were last dropped
	n      atomic.Int32 // len(m), read without the lock while no queue is refused
}

// hold is one queue and shard's refusal: the hold until until, and the
// counts the throttle decides on.
type hold struct {
	set   time.Time // when the last refusal was noted
	until time.Time
	retry time.Duration // the node's retry time
	msg   string
	last  int64 // the latest slot counted in
	slots [throttleSlots]struct {
		n           int64 // slot number the counts are for
		made, taken int
	}
}

// slot is now's slot number.
func (h *sendHolds) slot(now time.Time) int64 {
	return max(0, int64(now.Sub(h.base)/throttleSlot))
}

// count adds made and taken sends to slot n.
func (e *hold) count(n int64, made, taken int) {
	s := &e.slots[n%throttleSlots]
	if s.n > n {
		return // a caller that read the clock before a newer one counted
	}
	if s.n != n {
		s.n, s.made, s.taken = n, 0, 0
	}
	s.made += made
	s.taken += taken
	e.last = max(e.last, n)
}

// refuseShare is the share of sends to refuse in the client at slot n.
func (e *hold) refuseShare(n int64) float64 {
	made, taken := 0, 0
	for _, s := range e.slots {
		if s.n > n-throttleSlots && s.n <= n {
			made += s.made
			taken += s.taken
		}
	}
	if made < throttleMinMade {
		return 0
	}
	return max(0, float64(made-throttleK*taken)/float64(made+1))
}

// purge drops, at most once a window, the entries whose hold is over
// and whose counts are all older than the window: a queue refused once
// and not sent to since would otherwise keep every send taking the lock.
func (h *sendHolds) purge(now time.Time) {
	if now.Sub(h.purged) < throttleWindow {
		return
	}
	h.purged = now
	n := h.slot(now)
	for k, e := range h.m {
		if !now.Before(e.until) && e.last <= n-throttleSlots {
			delete(h.m, k)
		}
	}
	h.n.Store(int32(len(h.m)))
}

// note holds k's sends for retry after a refusal saying msg.
func (h *sendHolds) note(k holdKey, msg string, retry time.Duration, now time.Time) {
	if k.queue == "" || retry <= 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m, h.base = map[holdKey]*hold{}, now
	}
	e := h.m[k]
	if e == nil {
		if len(h.m) >= maxHolds {
			for q, old := range h.m {
				if !now.Before(old.until) {
					delete(h.m, q)
				}
			}
			if len(h.m) >= maxHolds {
				h.n.Store(int32(len(h.m)))
				return
			}
		}
		e = &hold{}
		h.m[k] = e
		h.n.Store(int32(len(h.m)))
	}
	e.set, e.until, e.retry, e.msg = now, now.Add(retry), retry, msg
}

// check decides whether a send to k may leave, and counts it as made. If
// not, it returns the refusal the call gets: the node's message with the
// time left of its hold, or, throttled, half the node's retry time. The
// time is spread up to a quarter further, so the calls it kept back do
// not all return at the same instant.
func (h *sendHolds) check(k holdKey, now time.Time) (*Error, bool) {
	if h.n.Load() == 0 {
		return nil, false
	}
	h.mu.Lock()
	h.purge(now)
	e := h.m[k]
	if e == nil {
		h.mu.Unlock()
		return nil, false
	}
	n := h.slot(now)
	e.count(n, 1, 0)
	var left time.Duration
	var why string
	if now.Before(e.until) {
		left, why = e.until.Sub(now), "held"
	} else if p := e.refuseShare(n); p == 0 {
		// The node takes sends as fast as they are made: forget it.
		delete(h.m, k)
		h.n.Store(int32(len(h.m)))
	} else if rand.Float64() < p {
		left, why = e.retry/2, fmt.Sprintf("throttled, %.0f%% of sends", 100*p)
	}
	msg := e.msg
	h.mu.Unlock()
	if left == 0 {
		return nil, false
	}
	left += rand.N(left/4 + 1)
	return &Error{Code: codes.ResourceExhausted, Held: true, RetryAfter: left,
		Msg: fmt.Sprintf("%s (%s by the client: try sends to %q again in %v)", msg, why, k.queue, left.Round(time.Millisecond))}, true
}

// taken counts a send to k that a node took, and ends the hold if the
// send left (at sent) after the refusal was noted: one that left before
// may have waited in the node's queue while the node began refusing.
func (h *sendHolds) taken(k holdKey, sent, now time.Time) {
	if h.n.Load() == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if e := h.m[k]; e != nil {
		e.count(h.slot(now), 0, 1)
		if e.set.Before(sent) && now.Before(e.until) {
			e.until = now
		}
	}
}

// noteRefusal holds k after err, when err is a refusal with a retry time
// that a node, not this client, made.
func (h *sendHolds) noteRefusal(k holdKey, err error, now time.Time) {
	if e, ok := err.(*Error); ok && e.Held {
		return
	}
	if after, ok := RetryAfter(err); ok {
		h.note(k, status.Convert(err).Message(), after, now)
	}
}

// noteItems holds k after a batch whose every item was refused with a
// retry time, for the shortest of them, and reports whether it did: a
// batch of which some items went in shows the queue still takes sends.
func (h *sendHolds) noteItems(k holdKey, errs []error, now time.Time) bool {
	var retry time.Duration
	msg := ""
	for _, err := range errs {
		after, ok := RetryAfter(err)
		if !ok || status.Code(err) != codes.ResourceExhausted {
			return false
		}
		if retry == 0 || after < retry {
			retry, msg = after, err.Error()
		}
	}
	h.note(k, msg, retry, now)
	return true
}

// sendAnswered tells the hold of k what a send call that began at start
// was answered: a batch whose every item was refused with a retry time
// holds k (noteItems), one with an item taken (or a lone Send, errs nil)
// counts as taken, and one whose items all failed otherwise neither.
func (c *Client) sendAnswered(k holdKey, start time.Time, errs []error) {
	if !c.cfg.sendHold || k.queue == "" {
		return
	}
	now := time.Now()
	if len(errs) > 0 {
		if status.Code(errs[0]) == codes.ResourceExhausted && c.holds.noteItems(k, errs, now) {
			return
		}
		if !slices.Contains(errs, nil) {
			return
		}
	}
	c.holds.taken(k, start, now)
}

// holdable is the queue a send's hold is kept for (callSpec.sendTo), or
// "" when its sends are not held: a send the client cannot place on one
// shard, or one with metadata of its own, which may act for another
// principal under the same queue name.
func holdable(ctx context.Context, queue string, shard int) string {
	if shard == anyShard || hasOutgoingMetadata(ctx) {
		return ""
	}
	return queue
}
