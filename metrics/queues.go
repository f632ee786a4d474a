package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/meta"
)

// OtherQueue is the queue label of every queue past the label cap
// (WithMaxQueueLabels) and of names that are not queues.
const OtherQueue = "_other"

// DefaultMaxQueueLabels is how many queues get a queue label of their own
// by default. Every queue label value multiplies the series of each
// per-queue metric (about 40 with the message states and events), so the
// cap bounds the registry whatever clients create.
const DefaultMaxQueueLabels = 500

// Option configures New.
type Option func(*Metrics)

// WithMaxQueueLabels sets how many queues get a label value of their own;
// the rest are counted under queue="_other". n < 1 means the default.
func WithMaxQueueLabels(n int) Option {
	return func(m *Metrics) {
		if n >= 1 {
			m.queues.max = n
		}
	}
}

// QueueSource says which queues exist; *meta.Store implements it, and New
// finds it on a node with a Meta method (*cluster.Node).
type QueueSource interface {
	Queue(name string) (meta.Queue, bool)
	Queues() []meta.Queue
}

// queueLabels decides the queue label value of each queue. A queue that
// exists gets its name while fewer than max names are in use, first come
// first served, and keeps it until it is deleted; every other name is
// OtherQueue. Label values are thus only ever names of existing queues, at
// most max of them.
type queueLabels struct {
	src QueueSource // nil: every name is taken to exist (a node without meta, in tests)
	max int

	mu       sync.RWMutex
	admitted map[string]struct{}
}

func (l *queueLabels) label(q string) string {
	// Every counted call asks, nearly always for an admitted name: read
	// lock first.
	l.mu.RLock()
	_, ok := l.admitted[q]
	l.mu.RUnlock()
	if ok {
		return q
	}
	if q == "" {
		return OtherQueue
	}
	if l.src != nil {
		if _, ok := l.src.Queue(q); !ok {
			return OtherQueue
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.admitted[q]; ok {
		return q
	}
	if len(l.admitted) >= l.max {
		return OtherQueue
	}
	if l.admitted == nil {
		l.admitted = make(map[string]struct{})
	}
	l.admitted[q] = struct{}{}
	return q
}

// prune forgets the names of deleted queues and returns them, so their
// series can be removed.
func (l *queueLabels) prune() []string {
	if l.src == nil {
		return nil
	}
	exist := make(map[string]struct{})
	for _, q := range l.src.Queues() {
		exist[q.Name] = struct{}{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var gone []string
	for q := range l.admitted {
		if _, ok := exist[q]; !ok {
			delete(l.admitted, q)
			gone = append(gone, q)
		}
	}
	return gone
}

// messageEvents maps the moves the FSM reports at settle time to the event
// names of raftq_messages_total; the transitionReasons go to
// raftq_queue_transitions_total, and the rest (fsm.MoveSent,
// fsm.MoveReceived: the server counts sends and receives by API call) to
// neither.
var messageEvents = map[string]string{
	fsm.MoveAcked:             "acked",
	fsm.MoveNacked:            "nacked",
	fsm.MoveSnoozed:           "snoozed",
	fsm.MoveExtended:          "extended",
	fsm.MoveDeadLetteredByCli: "dead_lettered",
}

// transitionReasons are the moves raftq_queue_transitions_total counts.
var transitionReasons = []string{
	fsm.MoveLeaseExpired, fsm.MoveNacked, fsm.MoveSnoozed, fsm.MoveDeadLettered, fsm.MoveDeadLetteredByCli,
	fsm.MoveRedriven, fsm.MoveExpired, fsm.MoveDeadExpired,
}

// countersCollector serves the per-queue counters. Before each collection
// it adds what the led shards counted since the last one (Shard.Moves), so
// the counters only grow: a shard that moves away or loses its counts
// takes nothing back, and a queue folded into OtherQueue adds to it. It
// also removes the series of deleted queues.
type countersCollector struct {
	m *Metrics

	mu   sync.Mutex
	last map[uint32]map[moveKey]uint64 // by shard: the counts added so far
}

type moveKey struct{ queue, event string }

func (c *countersCollector) Describe(ch chan<- *prometheus.Desc) {
	c.m.messages.Describe(ch)
	c.m.transitions.Describe(ch)
}

func (c *countersCollector) Collect(ch chan<- prometheus.Metric) {
	c.sync()
	c.m.messages.Collect(ch)
	c.m.transitions.Collect(ch)
}

func (c *countersCollector) sync() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, q := range c.m.queues.prune() {
		c.m.messages.DeletePartialMatch(prometheus.Labels{"queue": q})
		c.m.transitions.DeletePartialMatch(prometheus.Labels{"queue": q})
	}
	seen := make(map[uint32]map[moveKey]uint64)
	for _, sh := range c.m.shards.LocalShards() {
		prev := c.last[sh.ID()]
		now := make(map[moveKey]uint64)
		for _, mv := range sh.Moves() {
			k := moveKey{mv.Queue, mv.Event}
			now[k] = mv.N
			d := mv.N
			if p := prev[k]; p <= mv.N {
				d = mv.N - p
			} // else the shard was reopened and counts from 0 again
			if d == 0 {
				continue
			}
			q := c.m.queues.label(mv.Queue)
			if ev, ok := messageEvents[mv.Event]; ok {
				c.m.messages.WithLabelValues(q, ev).Add(float64(d))
			}
			if isTransition(mv.Event) {
				c.m.transitions.WithLabelValues(q, mv.Event).Add(float64(d))
			}
		}
		seen[sh.ID()] = now
	}
	c.last = seen
}

func isTransition(ev string) bool {
	for _, r := range transitionReasons {
		if r == ev {
			return true
		}
	}
	return false
}

// WithQueueSource sets where New learns which queues exist, in place of
// the node's meta store.
func WithQueueSource(src QueueSource) Option {
	return func(m *Metrics) { m.queues.src = src }
}
