package meta

import (
	"context"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/raftmux"
)

// sidelineTransferWait bounds the leadership transfer a sidelined leader
// tries; a leader whose raft loop is stuck never answers it.
const sidelineTransferWait = 5 * time.Second

// Sideline keeps this meta replica from leading for reason (a short label,
// e.g. "clock-skew"), like shard.Shard.Sideline: its raft gate holds its
// campaigns (raftmux.HoldCampaign, so it still replicates and votes), it
// refuses writes as a follower would (IsLeader is false), and if it leads,
// leadership is transferred away in the background. Several reasons may
// hold at once; Unsideline releases one.
func (s *Store) Sideline(reason string) {
	s.sideMu.Lock()
	again := s.sidelines[reason]
	s.sidelines[reason] = true
	s.sidelined.Store(true)
	s.sideMu.Unlock()
	s.gate.Hold(reason, raftmux.HoldCampaign)
	if again {
		return
	}
	s.logger.Warn("meta replica sidelined: it will not lead", "reason", reason)
	s.notify() // meta duties re-check IsLeader
	if s.raft.State() == raft.Leader {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), sidelineTransferWait)
			defer cancel()
			if err := raftgroup.WaitFuture(ctx, s.raft.LeadershipTransfer(), nil); err != nil {
				s.logger.Warn("sidelined meta leader could not transfer leadership", "reason", reason, "err", err)
			}
		}()
	}
}

// Unsideline releases reason; the replica may lead again once no reason
// holds.
func (s *Store) Unsideline(reason string) {
	s.sideMu.Lock()
	held := s.sidelines[reason]
	delete(s.sidelines, reason)
	s.sidelined.Store(len(s.sidelines) > 0)
	s.sideMu.Unlock()
	s.gate.Release(reason)
	if held {
		s.logger.Info("meta replica no longer sidelined", "reason", reason)
		s.notify()
	}
}

// Sidelined reports whether any reason keeps this replica from leading.
func (s *Store) Sidelined() bool { return s.sidelined.Load() }
