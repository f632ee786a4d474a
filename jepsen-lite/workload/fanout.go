package workload

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/jepsen-lite/history"
)

// FanTopic is the fan-out workload's topic. It is not among the
// workload's Queues: nothing receives from a topic, so the final phase
// must not drain it; its subscriptions are drained instead (DrainQueues).
const FanTopic = "jepsen-fan"

// fanSub is one subscription of FanTopic and how its consumers behave.
type fanSub struct {
	name   string
	filter string
	// maxReceives: 3 on the poison subscription, so that nacking a
	// poison copy dead-letters it soon; 20 elsewhere, which the
	// consumers' crashes, late acks and nacks never reach in practice.
	maxReceives uint32
	// poison: the consumers dead-letter poison copies, by hand
	// (DeadLetter) or by nacking them until max receives.
	poison bool
	// late: created while the producers run, after lateAfter.
	late bool
}

// fanSubs: one takes everything, one filters on an attribute and the
// message type, one dead-letters the poison publishes, and one is created
// under load and faults, so that "published after its creation" is
// judged against a creation time that is not the run's start.
var fanSubs = []fanSub{
	{name: "jepsen-fan-all", maxReceives: 20},
	{name: "jepsen-fan-eu", filter: "attr.region ^= eu- and type != audit", maxReceives: 20},
	{name: "jepsen-fan-dlq", maxReceives: 3, poison: true},
	{name: "jepsen-fan-late", maxReceives: 20, late: true},
}

// fanGroups is how many FIFO groups publish, one sequential producer
// each (so publish order is known); fanPace their mean pause.
const (
	fanGroups = 3
	fanPace   = 250 * time.Millisecond
)

// fanoutWorkload publishes unique values with group ids, attributes and
// a type to a FIFO topic with four subscriptions, each drained by its own
// consumers (checker fanout).
func fanoutWorkload() *Workload {
	const vis = 2 * time.Second
	var (
		mu      sync.Mutex
		created []string // subscriptions whose creation was confirmed
	)
	w := &Workload{Name: "fanout", Visibility: vis, drains: func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), created...)
	}}
	w.run = func(ctx context.Context, env *Env, seed uint64) {
		setup := env.NewClient(seed + 90)
		topic := &history.Subscription{Topic: FanTopic, FIFO: true}
		if !subscribeUntilOK(ctx, setup, FanTopic, topic, &raftqv1.QueuePolicy{Mode: raftqv1.QueueMode_QUEUE_MODE_FIFO, Topic: true,
			DedupWindowMs: (30 * time.Minute).Milliseconds()}) {
			return
		}
		var wg sync.WaitGroup
		startConsumers := func(s fanSub, k int) {
			for j := range 2 {
				c := env.NewClient(seed + 100 + uint64(10*k+j))
				spawn(&wg, func() { fanConsumer(ctx, c, s, vis) })
			}
		}
		subscribe := func(s fanSub) bool {
			sub := &history.Subscription{Topic: FanTopic, FIFO: true, Filter: s.filter, MaxReceives: s.maxReceives, Poison: s.poison}
			p := policy(raftqv1.QueueMode_QUEUE_MODE_FIFO, vis, s.maxReceives)
			p.SubscriptionOf, p.Filter = FanTopic, s.filter
			if !subscribeUntilOK(ctx, setup, s.name, sub, p) {
				return false
			}
			mu.Lock()
			created = append(created, s.name)
			mu.Unlock()
			return true
		}
		for k, s := range fanSubs {
			if s.late {
				continue
			}
			if !subscribe(s) {
				wg.Wait()
				return
			}
			startConsumers(s, k)
		}
		for g := range fanGroups {
			c := env.NewClient(seed + uint64(g))
			group := fmt.Sprintf("g%d", g)
			spawn(&wg, func() { publisher(ctx, c, group) })
		}
		for k, s := range fanSubs {
			if !s.late {
				continue
			}
			spawn(&wg, func() {
				if sleep(ctx, lateAfter(ctx)) && subscribe(s) {
					startConsumers(s, k)
				}
			})
		}
		wg.Wait()
	}
	return w
}

// lateAfter is when the late subscription is created: a quarter into
// the run, at most 30 s, so that publishes land on both sides of it.
func lateAfter(ctx context.Context) time.Duration {
	d := 20 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		d = min(30*time.Second, time.Until(dl)/4)
	}
	return d
}

// subscribeUntilOK creates a topic or subscription, retrying (each
// attempt recorded) until one is confirmed or ctx ends. Creating it again
// with the same policy succeeds, so a retry after an unknown outcome is
// safe.
func subscribeUntilOK(ctx context.Context, c *Client, name string, sub *history.Subscription, p *raftqv1.QueuePolicy) bool {
	for ctx.Err() == nil {
		if op := c.Subscribe(ctx, name, sub, p); op.Type == history.OK {
			return true
		}
		sleep(ctx, 200*time.Millisecond)
	}
	return false
}

// publisher publishes one group's unique values one at a time, retrying
// a value with the same dedup key until it is acknowledged or the budget
// is spent. About one in twelve is poison, one in ten an audit message
// (type audit: filtered out of jepsen-fan-eu, as is region us-east).
func publisher(ctx context.Context, c *Client, group string) {
	regions := []string{"eu-west", "eu-north", "us-east"}
	for n := 1; ctx.Err() == nil; n++ {
		attrs := map[string]string{"region": regions[c.rng.IntN(len(regions))], history.PoisonAttr: "normal"}
		typ := "order"
		value := fmt.Sprintf("fan-%s-%d", group, n)
		switch r := c.rng.Float64(); {
		case r < 0.08:
			attrs[history.PoisonAttr] = history.PoisonValue
			value += "-poison" // the consumers see bodies, not attributes
		case r < 0.18:
			typ = "audit"
		}
		for attempt := 0; attempt < 8 && ctx.Err() == nil; attempt++ {
			if op := c.Publish(ctx, FanTopic, group, value, "dk-"+value, typ, attrs); op.Type == history.OK {
				break
			}
			sleep(ctx, time.Duration(50<<min(attempt, 4))*time.Millisecond)
		}
		sleep(ctx, fanPace/2+time.Duration(c.rng.Int64N(int64(fanPace))))
	}
}

// fanConsumer consumes one subscription as consumer does (mostly acks;
// sometimes crashes holding the leases, acks late or nacks); on the
// poison subscription it dead-letters poison copies instead, by hand or
// by nacking them at once until their max receives.
func fanConsumer(ctx context.Context, c *Client, s fanSub, vis time.Duration) {
	for ctx.Err() == nil {
		op, ds := c.Receive(ctx, s.name, 4, time.Second, vis)
		if op.Type != history.OK {
			sleep(ctx, 100*time.Millisecond)
			continue
		}
		if len(ds) == 0 {
			continue
		}
		if s.poison {
			var rest []history.Delivery
			for _, d := range ds {
				switch {
				case !strings.HasSuffix(d.Value, "-poison"):
					rest = append(rest, d)
				case c.rng.IntN(2) == 0:
					c.DeadLetter(ctx, d)
				default:
					c.Nack(ctx, d, 0)
				}
			}
			if ds = rest; len(ds) == 0 {
				continue
			}
		}
		switch r := c.rng.Float64(); {
		case r < 0.04:
			c.Crash()
			continue
		case r < 0.10:
			sleep(ctx, vis+vis/2)
		case r < 0.15:
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
