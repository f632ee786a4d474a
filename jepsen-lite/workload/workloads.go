package workload

import (
	"context"
	"fmt"
	"sync"
	"time"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/jepsen-lite/history"
)

// Queue is a queue a workload needs, with its policy.
type Queue struct {
	Name   string
	Policy *raftqv1.QueuePolicy
	FIFO   bool
}

// Tenant is a tenant a workload needs, with its quotas; it is created
// before the queues, which may be its own ("TENANT/QUEUE").
type Tenant struct {
	Name   string
	Quotas *raftqv1.Quotas
}

// Workload is one scenario: its tenants, its queues and its clients.
type Workload struct {
	Name string
	// Visibility is the lease the consumers ask for; the final phase waits
	// past it before draining.
	Visibility time.Duration
	Tenants    []Tenant
	Queues     []Queue
	run        func(ctx context.Context, env *Env, seed uint64)
	// drains lists queues the workload created itself that the final
	// phase must drain too (nil: none).
	drains func() []string
}

// Run drives the clients until ctx ends and waits for them.
func (w *Workload) Run(ctx context.Context, env *Env, seed uint64) { w.run(ctx, env, seed) }

// DrainQueues is every queue the final phase drains and lists the DLQ
// of: Queues, then those the workload created while it ran (after Run
// returned: the fan-out workload's subscriptions, not its topic).
func (w *Workload) DrainQueues() []string {
	var out []string
	for _, q := range w.Queues {
		out = append(out, q.Name)
	}
	if w.drains != nil {
		out = append(out, w.drains()...)
	}
	return out
}

// ByName returns the named workload.
func ByName(name string) (*Workload, error) {
	switch name {
	case "queue":
		return queueWorkload(), nil
	case "fifo":
		return fifoWorkload(), nil
	case "lease":
		return leaseWorkload(), nil
	case "quota":
		return quotaWorkload(), nil
	case "cron":
		return cronWorkload(), nil
	case "fanout":
		return fanoutWorkload(), nil
	}
	return nil, fmt.Errorf("unknown workload %q (queue, fifo, lease, quota, cron, fanout)", name)
}

// Names lists every workload.
func Names() []string { return []string{"queue", "fifo", "lease", "quota", "cron", "fanout"} }

func policy(mode raftqv1.QueueMode, vis time.Duration, maxReceives uint32) *raftqv1.QueuePolicy {
	return &raftqv1.QueuePolicy{
		Mode: mode, VisibilityTimeoutMs: vis.Milliseconds(), MaxReceiveCount: maxReceives,
		BackoffBaseMs: 50, BackoffMaxMs: 500,
		// Longer than any run: the dedup checker assumes one window.
		DedupWindowMs: (30 * time.Minute).Milliseconds(),
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// producer sends unique values one at a time, retrying a value with the
// same dedup key until it is acknowledged or the budget is spent.
func producer(ctx context.Context, c *Client, queue, group, prefix string, pace time.Duration) {
	for n := 1; ctx.Err() == nil; n++ {
		value := fmt.Sprintf("%s-%d", prefix, n)
		for attempt := 0; attempt < 8 && ctx.Err() == nil; attempt++ {
			if op := c.Enqueue(ctx, queue, group, value, "dk-"+value); op.Type == history.OK {
				break
			}
			sleep(ctx, time.Duration(50<<min(attempt, 4))*time.Millisecond)
		}
		sleep(ctx, pace/2+time.Duration(c.rng.Int64N(int64(pace))))
	}
}

// consumer receives and mostly acks; sometimes it crashes holding the
// lease, acks after the lease expired, or nacks.
func consumer(ctx context.Context, c *Client, queue string, vis time.Duration) {
	for ctx.Err() == nil {
		op, ds := c.Receive(ctx, queue, 4, time.Second, vis)
		if op.Type != history.OK {
			sleep(ctx, 100*time.Millisecond)
			continue
		}
		if len(ds) == 0 {
			continue
		}
		switch r := c.rng.Float64(); {
		case r < 0.04:
			c.Crash() // walk away holding the leases
			continue
		case r < 0.10:
			sleep(ctx, vis+vis/2) // too slow: the acks below come late
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

func spawn(wg *sync.WaitGroup, fn func()) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		fn()
	}()
}

func queueWorkload() *Workload {
	const vis = 2 * time.Second
	q := Queue{Name: "jepsen-queue", Policy: policy(raftqv1.QueueMode_QUEUE_MODE_STANDARD, vis, 6)}
	return &Workload{Name: "queue", Visibility: vis, Queues: []Queue{q}, run: func(ctx context.Context, env *Env, seed uint64) {
		var wg sync.WaitGroup
		for p := range 3 {
			c := env.NewClient(seed + uint64(p))
			spawn(&wg, func() { producer(ctx, c, q.Name, "", fmt.Sprintf("q%d", p), 40*time.Millisecond) })
		}
		for k := range 3 {
			c := env.NewClient(seed + 100 + uint64(k))
			spawn(&wg, func() { consumer(ctx, c, q.Name, vis) })
		}
		wg.Wait()
	}}
}

func fifoWorkload() *Workload {
	const vis = 2 * time.Second
	q := Queue{Name: "jepsen-fifo", Policy: policy(raftqv1.QueueMode_QUEUE_MODE_FIFO, vis, 20), FIFO: true}
	return &Workload{Name: "fifo", Visibility: vis, Queues: []Queue{q}, run: func(ctx context.Context, env *Env, seed uint64) {
		var wg sync.WaitGroup
		// One sequential producer per group, so enqueue order is known.
		for g := range 5 {
			c := env.NewClient(seed + uint64(g))
			group := fmt.Sprintf("g%d", g)
			spawn(&wg, func() { producer(ctx, c, q.Name, group, "f"+group, 60*time.Millisecond) })
		}
		for k := range 3 {
			c := env.NewClient(seed + 100 + uint64(k))
			spawn(&wg, func() { consumer(ctx, c, q.Name, vis) })
		}
		wg.Wait()
	}}
}

// leaseWorkload runs handlers longer than the lease: most extend it in
// time, some forget, so their message is delivered again and their final
// ack must be refused.
func leaseWorkload() *Workload {
	const vis = time.Second
	q := Queue{Name: "jepsen-lease", Policy: policy(raftqv1.QueueMode_QUEUE_MODE_STANDARD, vis, 50)}
	return &Workload{Name: "lease", Visibility: vis, Queues: []Queue{q}, run: func(ctx context.Context, env *Env, seed uint64) {
		var wg sync.WaitGroup
		for p := range 2 {
			c := env.NewClient(seed + uint64(p))
			spawn(&wg, func() { producer(ctx, c, q.Name, "", fmt.Sprintf("l%d", p), 150*time.Millisecond) })
		}
		for k := range 4 {
			c := env.NewClient(seed + 100 + uint64(k))
			spawn(&wg, func() { longHandler(ctx, c, q.Name, vis) })
		}
		wg.Wait()
	}}
}

func longHandler(ctx context.Context, c *Client, queue string, vis time.Duration) {
	for ctx.Err() == nil {
		op, ds := c.Receive(ctx, queue, 1, time.Second, vis)
		if op.Type != history.OK || len(ds) == 0 {
			if op.Type != history.OK {
				sleep(ctx, 100*time.Millisecond)
			}
			continue
		}
		d := ds[0]
		forget := c.rng.Float64() < 0.2
		work := 2*vis + time.Duration(c.rng.Int64N(int64(vis)))
		end := time.Now().Add(work)
		alive := true
		for time.Now().Before(end) && ctx.Err() == nil {
			sleep(ctx, vis/3)
			if forget || !alive {
				continue
			}
			if op := c.Extend(ctx, d, vis); op.Type != history.OK {
				alive = false // lost the lease (or do not know): finish anyway, the ack decides
			}
		}
		c.Ack(ctx, d)
	}
}
