package shard

import (
	"sort"
	"sync"

	"github.com/raftq/raftq/fsm"
)

// moveCounts sums the moves of messages (fsm.Options.Moves) this replica
// applied while it led the shard. Every replica applies every move; only
// the leader's count, so that summing over nodes counts each move once in
// steady state. Around a change of leader a few moves may be counted by
// both or neither, and a restarted leader counts again what it replays:
// the counts are for rates and alerts, not for accounting.
type moveCounts struct {
	mu sync.Mutex
	n  map[string]map[string]uint64 // by queue, then event
}

func (c *moveCounts) add(ms []fsm.MoveCount) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = make(map[string]map[string]uint64)
	}
	for _, m := range ms {
		q := c.n[m.Queue]
		if q == nil {
			q = make(map[string]uint64)
			c.n[m.Queue] = q
		}
		q[m.Event] += m.N
	}
}

// snapshot returns the counts of the queues in keep and forgets those of
// the others: a deleted queue's counts go, so the map stays as large as
// the shard's queues.
func (c *moveCounts) snapshot(keep func(queue string) bool) []fsm.MoveCount {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []fsm.MoveCount
	for q, evs := range c.n {
		if !keep(q) {
			delete(c.n, q)
			continue
		}
		for ev, n := range evs {
			out = append(out, fsm.MoveCount{Queue: q, Event: ev, N: n})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Queue != out[j].Queue {
			return out[i].Queue < out[j].Queue
		}
		return out[i].Event < out[j].Event
	})
	return out
}

// of returns a copy of one queue's counts by event, nil if it has none.
func (c *moveCounts) of(queue string) map[string]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	evs := c.n[queue]
	if len(evs) == 0 {
		return nil
	}
	out := make(map[string]uint64, len(evs))
	for ev, n := range evs {
		out[ev] = n
	}
	return out
}

// onMoves is the FSM's Moves callback.
func (s *Shard) onMoves(ms []fsm.MoveCount) {
	if !s.lead.Load().leader {
		return
	}
	s.moves.add(ms)
}

// Moves reports the moves of messages counted while this replica led the
// shard (moveCounts), by queue and event, for the queues the shard still
// has.
func (s *Shard) Moves() []fsm.MoveCount {
	qs := s.fsm.Queues()
	return s.moves.snapshot(func(q string) bool { _, ok := qs[q]; return ok })
}

// QueueMoves is Moves for one queue, by event: what queue stats report
// (router/local.go). A queue deleted and created again may carry on from
// the old queue's counts until the next Moves call forgets them; they only
// grow, so rates read from them stay right.
func (s *Shard) QueueMoves(queue string) map[string]uint64 {
	return s.moves.of(queue)
}
