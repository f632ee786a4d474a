package workload

import (
	"context"
	"fmt"
	"sync"
	"time"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/jepsen-lite/history"
)

// The quota workload's tenant, its queue and its quotas (docs/tenancy.md).
// Each shard enforces its share of a quota, the limit over the shard count
// rounded up, so the shares add up to the quota itself only when the
// count divides it: 60 and 12 are multiples of 1, 2, 3, 4 and 6 shards
// (a run with the reshard nemesis starts with 2, others with 4 unless
// told). The quotas are small, so that the clients below reach them within
// a second of any fault.
const (
	QuotaTenant      = "jepsen-quota"
	QuotaQueue       = QuotaTenant + "/q"
	QuotaMaxMessages = 60
	QuotaMaxInFlight = 12
)

// quotaWorkload keeps a tenant at its quotas: producers send faster than
// consumers can settle, so sends are refused past max_messages, and the
// consumers ask for more leases than max_in_flight allows, so receives are
// refused too. Checker quota judges both quotas cluster-wide and that
// every refusal says when to retry; the other checkers judge the queue as
// any other (nothing acknowledged lost, no two leases at once, ...).
func quotaWorkload() *Workload {
	const vis = 2 * time.Second
	// Max receives far above what a run gives one message: a message
	// dead-lettered leaves the live count at a moment the history does
	// not show, so the depth check can only leave it out.
	q := Queue{Name: QuotaQueue, Policy: policy(raftqv1.QueueMode_QUEUE_MODE_STANDARD, vis, 100)}
	t := Tenant{Name: QuotaTenant, Quotas: &raftqv1.Quotas{MaxMessages: QuotaMaxMessages, MaxInFlight: QuotaMaxInFlight}}
	return &Workload{Name: "quota", Visibility: vis, Tenants: []Tenant{t}, Queues: []Queue{q}, run: func(ctx context.Context, env *Env, seed uint64) {
		var wg sync.WaitGroup
		for p := range 3 {
			c := env.NewClient(seed + uint64(p))
			c.QueueHeader = true
			// The last producer ignores the retry times, as a flood
			// does: its sends meet the nodes' tap refusals, which must
			// say when to retry as well.
			polite := p < 2
			spawn(&wg, func() { quotaProducer(ctx, c, q.Name, fmt.Sprintf("t%d", p), polite) })
		}
		for k := range 5 {
			c := env.NewClient(seed + 100 + uint64(k))
			spawn(&wg, func() { quotaConsumer(ctx, c, q.Name, vis) })
		}
		wg.Wait()
	}}
}

// quotaProducer sends unique values one at a time with their dedup keys.
// A refused value is sent again (same key) up to 8 times: after the time
// the refusal asked for when polite (at most 2 s), else after 30-80 ms.
func quotaProducer(ctx context.Context, c *Client, queue, prefix string, polite bool) {
	for n := 1; ctx.Err() == nil; n++ {
		value := fmt.Sprintf("%s-%d", prefix, n)
		for attempt := 0; attempt < 8 && ctx.Err() == nil; attempt++ {
			op := c.Enqueue(ctx, queue, "", value, "dk-"+value)
			if op.Type == history.OK {
				break
			}
			wait := time.Duration(50<<min(attempt, 4)) * time.Millisecond
			if op.RetryAfterMs > 0 {
				if polite {
					wait = min(time.Duration(op.RetryAfterMs)*time.Millisecond, 2*time.Second)
				} else {
					wait = 30*time.Millisecond + time.Duration(c.rng.IntN(50))*time.Millisecond
				}
			}
			sleep(ctx, wait)
		}
		sleep(ctx, 10*time.Millisecond+time.Duration(c.rng.IntN(20))*time.Millisecond)
	}
}

// quotaConsumer leases up to 4 messages, works 100-600 ms and acks them;
// five of them want more leases than the in-flight quota allows. Half the
// receives do not wait, so a shard at its quota refuses them at once; the
// others long-poll 300 ms, and are refused when the wait runs out that
// way. 4 % walk away holding their leases (they count until they expire),
// 5 % nack.
func quotaConsumer(ctx context.Context, c *Client, queue string, vis time.Duration) {
	for ctx.Err() == nil {
		wait := time.Duration(0)
		if c.rng.IntN(2) == 0 {
			wait = 300 * time.Millisecond
		}
		op, ds := c.Receive(ctx, queue, 4, wait, vis)
		if op.Type != history.OK {
			pause := 100 * time.Millisecond
			if op.RetryAfterMs > 0 {
				pause = min(time.Duration(op.RetryAfterMs)*time.Millisecond, 500*time.Millisecond)
			}
			sleep(ctx, pause)
			continue
		}
		if len(ds) == 0 {
			sleep(ctx, 50*time.Millisecond)
			continue
		}
		sleep(ctx, 100*time.Millisecond+time.Duration(c.rng.IntN(500))*time.Millisecond)
		switch r := c.rng.Float64(); {
		case r < 0.04:
			c.Crash()
			continue
		case r < 0.09:
			for _, d := range ds {
				c.Nack(ctx, d, time.Duration(c.rng.IntN(200))*time.Millisecond)
			}
			continue
		}
		for _, d := range ds {
			c.Ack(ctx, d)
		}
	}
}
