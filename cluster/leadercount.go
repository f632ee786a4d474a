package cluster

import (
	"maps"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// leaderCounts counts how often this node became leader of each raft group:
// leader churn for operators, and the proof that a node held by its clock
// check never led (docs/clock.md).
type leaderCounts struct {
	mu     sync.Mutex
	groups map[string]*atomic.Uint64
}

// watch counts r's leadership changes to self. The count is taken in the
// observer's filter, which raft calls synchronously on every observation;
// with no channel nothing is queued and nothing can be dropped.
func (l *leaderCounts) watch(group string, r *raft.Raft, self string) {
	l.mu.Lock()
	if l.groups == nil {
		l.groups = map[string]*atomic.Uint64{}
	}
	c, ok := l.groups[group]
	if !ok {
		c = &atomic.Uint64{}
		l.groups[group] = c
	}
	l.mu.Unlock()
	r.RegisterObserver(raft.NewObserver(nil, false, func(o *raft.Observation) bool {
		if lo, ok := o.Data.(raft.LeaderObservation); ok && string(lo.LeaderID) == self {
			c.Add(1)
		}
		return false
	}))
}

func (l *leaderCounts) snapshot() map[string]uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]uint64, len(l.groups))
	for g, c := range maps.All(l.groups) {
		out[g] = c.Load()
	}
	return out
}
