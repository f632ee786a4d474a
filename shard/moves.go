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
	n  map[moveKey]uint64
}

type moveKey struct{ queue, event string }

func (c *moveCounts) add(ms []fsm.MoveCount) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = make(map[moveKey]uint64)
	}
	for _, m := range ms {
		c.n[moveKey{m.Queue, m.Event}] += m.N
	}
}

// snapshot returns the counts of the queues in keep and forgets those of
// the others: a deleted queue's counts go, so the map stays as large as
// the shard's queues.
func (c *moveCounts) snapshot(keep func(queue string) bool) []fsm.MoveCount {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]fsm.MoveCount, 0, len(c.n))
	for k, n := range c.n {
		if !keep(k.queue) {
			delete(c.n, k)
			continue
		}
		out = append(out, fsm.MoveCount{Queue: k.queue, Event: k.event, N: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Queue != out[j].Queue {
			return out[i].Queue < out[j].Queue
		}
		return out[i].Event < out[j].Event
	})
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
