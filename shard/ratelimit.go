package shard

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/fsmpb"
)

// Send rates (docs/tenancy.md). Each shard leader holds a token bucket per
// queue and per tenant with a rate quota, at the shard's share of the rate
// (fsmpb.ShardQuota): sends reach a shard only through its leader, so the
// shares add up to the quota cluster-wide whichever node a client calls.
// Buckets are the leader's memory, not replicated: a new leader starts
// them full, so a failover can let one extra burst through.

// maxBuckets bounds the buckets a leader keeps; past it, buckets that have
// refilled (and so hold nothing a fresh one would not) are dropped.
const maxBuckets = 10000

// RateError refuses a send past a send_rate quota: nothing was proposed.
type RateError struct {
	Subject    string // `queue "acme/jobs"` or `tenant "acme"`
	Rate       float64
	RetryAfter time.Duration
}

func (e *RateError) Error() string {
	return fmt.Sprintf("%s is at its quota: sends above its send_rate share of %.4g/s on this shard; retry in %v", e.Subject, e.Rate, e.RetryAfter.Round(time.Millisecond))
}

type bucket struct {
	tokens float64
	at     time.Time
}

// level refills b to now under rate and burst and returns its tokens.
func (b *bucket) level(rate, burst float64, now time.Time) float64 {
	if b.at.IsZero() {
		return burst
	}
	return math.Min(burst, b.tokens+now.Sub(b.at).Seconds()*rate)
}

type rateLimits struct {
	mu      sync.Mutex
	buckets map[string]*bucket // "q/" + queue or "t/" + tenant
}

// admit takes n tokens from the queue's bucket and its tenant's, or none
// with a *RateError when either is short. A batch larger than a bucket
// passes once the bucket is full and leaves it in debt, so no batch is
// refused for good.
func (r *rateLimits) admit(queue string, sq *fsmpb.ShardQuota, n int, now time.Time) error {
	if sq.GetSendRate() == 0 && sq.GetTenantSendRate() == 0 {
		return nil
	}
	type want struct {
		key, subject string
		rate, burst  float64
	}
	var ws []want
	if sq.GetSendRate() > 0 {
		ws = append(ws, want{"q/" + queue, fmt.Sprintf("queue %q", queue), sq.GetSendRate(), sq.GetSendBurst()})
	}
	if t := fsm.TenantOf(queue); t != "" && sq.GetTenantSendRate() > 0 {
		ws = append(ws, want{"t/" + t, fmt.Sprintf("tenant %q", t), sq.GetTenantSendRate(), sq.GetTenantSendBurst()})
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.buckets == nil {
		r.buckets = map[string]*bucket{}
	}
	for _, w := range ws {
		b := r.buckets[w.key]
		if b == nil {
			continue
		}
		need := math.Min(float64(n), w.burst)
		if have := b.level(w.rate, w.burst, now); have < need {
			wait := time.Duration((need - have) / w.rate * float64(time.Second))
			return &RateError{Subject: w.subject, Rate: w.rate, RetryAfter: max(wait, time.Millisecond)}
		}
	}
	for _, w := range ws {
		b := r.buckets[w.key]
		if b == nil {
			r.evict(now)
			b = &bucket{}
			r.buckets[w.key] = b
		}
		b.tokens, b.at = b.level(w.rate, w.burst, now)-float64(n), now
	}
	return nil
}

// evict drops buckets idle long enough to have refilled when the map is
// at its bound; a dropped bucket comes back full, as it would have been.
func (r *rateLimits) evict(now time.Time) {
	if len(r.buckets) < maxBuckets {
		return
	}
	for k, b := range r.buckets {
		// An hour refills the bucket of any rate of a few per second and
		// up; a slower queue idle that long gets an early burst at worst.
		if now.Sub(b.at) > time.Hour {
			delete(r.buckets, k)
		}
	}
}
