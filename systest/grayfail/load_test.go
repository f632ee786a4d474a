package grayfail

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/wire"
)

// ack is one acknowledged send.
type ack struct {
	at  time.Time
	key string // the dedup key, also the body
	id  string
}

// load runs concurrent senders through one client, each sending messages
// with dedup keys of its own one at a time, and records every
// acknowledgement. A failed send is sent again with the same key until it
// is acknowledged or the load stops, as a producer that must not lose a
// message does: the key makes the repeat harmless.
type load struct {
	c      *client.Client
	queue  string
	prefix string
	shard  uint32 // every key places its message on this shard

	stop chan struct{}
	wg   sync.WaitGroup

	mu     sync.Mutex
	acks   []ack
	errs   int
	sample []string // the first few errors, for the log
}

// startLoad starts n senders. Even senders give each send a 5 s deadline
// and odd ones none beyond the load's own context, so both the caller's
// deadline and the client's own per-attempt bound are exercised.
func startLoad(ctx context.Context, c *client.Client, queue, prefix string, shard uint32, n int) *load {
	l := &load{c: c, queue: queue, prefix: prefix, shard: shard, stop: make(chan struct{})}
	for w := range n {
		l.wg.Add(1)
		go l.sender(ctx, w, w%2 == 0)
	}
	return l
}

func (l *load) sender(ctx context.Context, w int, deadline bool) {
	defer l.wg.Done()
	n := 0
	for {
		key := l.nextKey(w, &n)
		for {
			select {
			case <-l.stop:
				return
			case <-ctx.Done():
				return
			default:
			}
			sctx, cancel := ctx, context.CancelFunc(func() {})
			if deadline {
				sctx, cancel = context.WithTimeout(ctx, 5*time.Second)
			}
			res, err := l.c.Send(sctx, l.queue, []byte(key), client.DedupKey(key))
			cancel()
			if err == nil {
				l.mu.Lock()
				l.acks = append(l.acks, ack{at: time.Now(), key: key, id: res.ID})
				l.mu.Unlock()
				break
			}
			l.mu.Lock()
			l.errs++
			if len(l.sample) < 5 {
				l.sample = append(l.sample, fmt.Sprintf("%s %s: %v", time.Now().Format("15:04:05.000"), key, err))
			}
			l.mu.Unlock()
			if errors.Is(err, client.ErrInvalid) || errors.Is(err, client.ErrNotFound) {
				return // a bug in the test, not a fault to ride out
			}
			// A failed send returns at once only when the client gave up;
			// do not spin against a cluster that refuses everything.
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// nextKey returns sender w's next dedup key that places a message on the
// load's shard (the shard of an ungrouped message is its key's).
func (l *load) nextKey(w int, n *int) string {
	for {
		*n++
		key := fmt.Sprintf("%s-w%d-%d", l.prefix, w, *n)
		if s, _ := wire.ShardForMessage(l.queue, "", key, shards); s == l.shard {
			return key
		}
	}
}

// halt stops the senders and waits for the sends in flight.
func (l *load) halt() {
	close(l.stop)
	l.wg.Wait()
}

// count is how many sends were acknowledged so far.
func (l *load) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acks)
}

// waitAcks waits until n more sends than now are acknowledged.
func (l *load) waitAcks(ctx context.Context, n int) error {
	want := l.count() + n
	for l.count() < want {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d acknowledgements: %w", l.count(), want, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// gap is the longest time within [from, to] without an acknowledged send:
// from the start of the window to the first acknowledgement in it, between
// two consecutive ones, or from the last one to the end of the window.
// at is where the longest gap began.
func (l *load) gap(from, to time.Time) (longest time.Duration, at time.Time) {
	l.mu.Lock()
	times := make([]time.Time, 0, len(l.acks))
	for _, a := range l.acks {
		if a.at.After(from) && a.at.Before(to) {
			times = append(times, a.at)
		}
	}
	l.mu.Unlock()
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	prev := from
	for _, t := range append(times, to) {
		if d := t.Sub(prev); d > longest {
			longest, at = d, prev
		}
		prev = t
	}
	return longest, at
}

// acked returns every acknowledged send by dedup key.
func (l *load) acked() map[string]ack {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]ack, len(l.acks))
	for _, a := range l.acks {
		out[a.key] = a
	}
	return out
}

// drain receives every message of the queue (leasing each for long enough
// that none is delivered twice within the drain) until receives come back
// empty for quiet in a row, and returns the message ids seen per body.
func drain(ctx context.Context, t *testing.T, c *client.Client, queue string, quiet time.Duration) map[string][]string {
	t.Helper()
	seen := map[string][]string{}
	lastGot := time.Now()
	for time.Since(lastGot) < quiet {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		ms, err := c.Receive(rctx, queue, client.ReceiveOptions{Max: 1000, Wait: 500 * time.Millisecond, Visibility: 10 * time.Minute})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				t.Fatalf("drain %s: %v", queue, err)
			}
			t.Logf("drain %s: receive: %v", queue, err)
			continue
		}
		for _, m := range ms {
			if !slices.Contains(seen[string(m.Body)], m.ID) {
				seen[string(m.Body)] = append(seen[string(m.Body)], m.ID)
			}
		}
		if len(ms) > 0 {
			lastGot = time.Now()
		}
	}
	return seen
}
