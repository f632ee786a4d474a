package shard

import (
	"fmt"
	"sync"
	"time"

	"github.com/raftq/raftq/fsm"
)

// The queue of sends waiting for the proposer is fair across tenants and,
// within a tenant, across queues (docs/tenancy.md, "Fairness"): the
// proposer takes next from the tenant that has been served the fewest
// bytes for its weight, and within it from the queue served the fewest,
// so one tenant's flood adds at most a round's worth of its sends in
// front of another's, and a hot queue cannot fill every round.
//
// It is bounded by bytes and by age, so an overloaded leader refuses a
// send at once (RESOURCE_EXHAUSTED with a retry hint) instead of holding it
// until the caller's deadline: a caller told "not now" can back off or go
// elsewhere, one that times out cannot tell whether its send was taken.
// The bounds are per tenant, so a flood is refused without refusing the
// others. Consumers' commands use the other lane and are never refused
// here (runProposer).
const (
	// maxQueuedSendBytes is twice what raft holds in flight
	// (maxInFlightBytes): enough to fill the next rounds while raft
	// stores the current ones, so a closed-loop producer keeps the
	// proposer busy. More only makes accepted sends wait: sixteen times,
	// under a flood on one core, held them 1-3 s in this queue, and with
	// them the consumers' share of the core (docs/benchmarks-overload.md).
	maxQueuedSendBytes = 2 * maxInFlightBytes
	// maxSendQueueWait: sends of a tenant queued while the proposer took
	// none of its for this long are behind a stuck or starved proposer.
	maxSendQueueWait = 2 * time.Second
	// sendQueueRetry is the wait a refused sender is asked for.
	sendQueueRetry = 200 * time.Millisecond
)

// ErrOverloaded matches (errors.Is) an *OverloadError.
var ErrOverloaded = errOverloaded{}

type errOverloaded struct{}

func (errOverloaded) Error() string { return "shard overloaded" }

// OverloadError refuses a send because the leader's queue of sends is
// full: nothing was proposed. RetryAfter is how long the sender should
// wait.
type OverloadError struct {
	Shard      uint32
	Reason     string
	RetryAfter time.Duration
}

func (e *OverloadError) Error() string {
	return fmt.Sprintf("shard %d is overloaded: %s; retry in %v", e.Shard, e.Reason, e.RetryAfter)
}

// Is makes errors.Is(err, ErrOverloaded) hold.
func (e *OverloadError) Is(target error) bool { return target == ErrOverloaded }

// sendQueue holds the sends waiting for the proposer.
type sendQueue struct {
	mu      sync.Mutex
	tenants map[string]*tenantLane // with sends queued
	bytes   int64
	count   int
	// ready holds one wake-up while any send is queued: the proposer
	// selects on it as it did on a channel of sends.
	ready chan struct{}
	// served: the least service of any tenant that has queued sends, kept
	// as a floor for a tenant that starts queueing, so it cannot bank
	// credit while idle and then crowd the others out.
	floor float64
}

// tenantLane is one tenant's queued sends, by queue.
type tenantLane struct {
	name   string
	weight float64
	queues map[string]*queueLane
	bytes  int64
	served float64 // bytes taken / weight
	taken  time.Time
}

type queueLane struct {
	name   string
	sends  []*proposal
	served float64
}

func newSendQueue() *sendQueue {
	return &sendQueue{tenants: map[string]*tenantLane{}, ready: make(chan struct{}, 1)}
}

// push queues p, a send to queue, or refuses it. A tenant's sends may
// fill the queue up to an equal share with one more tenant, so a tenant
// that starts sending always finds room; a send is taken while its
// tenant's queued bytes are below that share (and the queue's below its
// bound), so it may pass the share by one request: the share can be
// smaller than the largest request, which must not starve behind smaller
// ones. A tenant with nothing queued is never refused for bytes.
func (q *sendQueue) push(p *proposal, queue string, weight float64, limit int64, shard uint32, now time.Time) error {
	tenant := fsm.TenantOf(queue)
	q.mu.Lock()
	defer q.mu.Unlock()
	t := q.tenants[tenant]
	if t != nil {
		share := limit / int64(len(q.tenants)+1)
		switch {
		case now.Sub(t.taken) > maxSendQueueWait:
			return &OverloadError{Shard: shard, Reason: fmt.Sprintf("no queued send of %s was proposed for %v", tenantWords(tenant), maxSendQueueWait), RetryAfter: sendQueueRetry}
		case t.bytes >= share:
			return &OverloadError{Shard: shard, Reason: fmt.Sprintf("%d bytes of sends of %s already wait to be proposed, its share of %d", t.bytes, tenantWords(tenant), share), RetryAfter: sendQueueRetry}
		case q.bytes >= limit:
			return &OverloadError{Shard: shard, Reason: fmt.Sprintf("%d bytes of sends already wait to be proposed", q.bytes), RetryAfter: sendQueueRetry}
		}
	}
	if t == nil {
		t = &tenantLane{name: tenant, queues: map[string]*queueLane{}, served: q.floor, taken: now}
		q.tenants[tenant] = t
	}
	t.weight = max(weight, 1)
	ql := t.queues[queue]
	if ql == nil {
		ql = &queueLane{name: queue, served: t.minQueueServed()}
		t.queues[queue] = ql
	}
	ql.sends = append(ql.sends, p)
	t.bytes += int64(p.size)
	q.bytes += int64(p.size)
	q.count++
	select {
	case q.ready <- struct{}{}:
	default:
	}
	return nil
}

// pop takes the next send: from the tenant served least for its weight,
// then its queue served least. nil when none is queued.
func (q *sendQueue) pop(now time.Time) *proposal {
	q.mu.Lock()
	defer q.mu.Unlock()
	var t *tenantLane
	for _, c := range q.tenants {
		if t == nil || c.served < t.served || (c.served == t.served && c.name < t.name) {
			t = c
		}
	}
	if t == nil {
		return nil
	}
	var ql *queueLane
	for _, c := range t.queues {
		if ql == nil || c.served < ql.served || (c.served == ql.served && c.name < ql.name) {
			ql = c
		}
	}
	p := ql.sends[0]
	ql.sends[0] = nil
	ql.sends = ql.sends[1:]
	size := float64(max(p.size, 1))
	ql.served += size
	t.served += size / t.weight
	t.bytes -= int64(p.size)
	t.taken = now
	q.bytes -= int64(p.size)
	q.count--
	if len(ql.sends) == 0 {
		delete(t.queues, ql.name)
	}
	if len(t.queues) == 0 {
		delete(q.tenants, t.name)
	}
	q.floor = t.served
	for _, c := range q.tenants {
		q.floor = min(q.floor, c.served)
	}
	if q.count > 0 {
		select {
		case q.ready <- struct{}{}:
		default:
		}
	}
	return p
}

func (t *tenantLane) minQueueServed() float64 {
	first, m := true, 0.0
	for _, c := range t.queues {
		if first || c.served < m {
			m, first = c.served, false
		}
	}
	return m
}

// queued returns the bytes and sends waiting.
func (q *sendQueue) queued() (int64, int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.bytes, q.count
}

func tenantWords(t string) string {
	if t == "" {
		return "queues of no tenant"
	}
	return fmt.Sprintf("tenant %q", t)
}

func (s *Shard) maxQueuedSend() int64 {
	if s.cfg.maxQueuedSend > 0 {
		return s.cfg.maxQueuedSend
	}
	return maxQueuedSendBytes
}
