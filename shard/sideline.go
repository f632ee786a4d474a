package shard

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/raftmux"
)

// Sideline reasons this package sets itself (raftgroup/logwatch.go).
const (
	reasonLogStall = "log-stall" // a raft store write is in flight past its bound
	reasonDiskFull = "disk-full" // a raft store write found no space
)

// sidelineFor returns a func that sidelines the replica for reason with h
// while its argument is true.
func (s *Shard) sidelineFor(reason string, h raftmux.Hold) func(bool) {
	return func(on bool) {
		if on {
			s.Sideline(reason, h)
		} else {
			s.Unsideline(reason)
		}
	}
}

// DiskStats reports the replica's raft store writes (raftgroup/logwatch.go).
func (s *Shard) DiskStats() raftgroup.DiskStats { return s.disk.Stats() }

// sidelineTransferWait bounds the leadership transfer a sidelined leader
// tries; a leader whose raft loop is stuck never answers it.
const sidelineTransferWait = 5 * time.Second

// Sideline keeps this replica from leading for reason (a short label, e.g.
// "clock-skew" or "log-stall"): h is held on its raft Gate (raftmux.Hold),
// its leader duties end at once (queued proposals are refused with a
// hint-less raftgroup.NotLeaderError, handed ones answered raftgroup.ErrUnknownResult), and if
// it leads, leadership is transferred away in the background. It keeps
// replicating as a follower unless h is HoldAll. Several reasons may hold
// at once; Unsideline releases one.
func (s *Shard) Sideline(reason string, h raftmux.Hold) {
	s.sideMu.Lock()
	_, again := s.sidelines[reason]
	s.sidelines[reason] = h
	s.sidelined.Store(true)
	s.sideMu.Unlock()
	s.gate.Hold(reason, h)
	kick(s.leaderKick)
	if again {
		return
	}
	s.logger.Warn("replica sidelined: it will not lead", "reason", reason, "hold", h.String())
	if s.raft.State() == raft.Leader && h != raftmux.HoldAll {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), sidelineTransferWait)
			defer cancel()
			if err := raftgroup.WaitFuture(ctx, s.raft.LeadershipTransfer(), s.raftDown); err != nil {
				s.logger.Warn("sidelined leader could not transfer leadership", "reason", reason, "err", err)
			}
		}()
	}
}

// Unsideline releases reason; the replica may lead again once no reason
// holds.
func (s *Shard) Unsideline(reason string) {
	s.sideMu.Lock()
	_, held := s.sidelines[reason]
	delete(s.sidelines, reason)
	s.sidelined.Store(len(s.sidelines) > 0)
	s.sideMu.Unlock()
	s.gate.Release(reason)
	if held {
		s.logger.Info("replica no longer sidelined", "reason", reason)
		kick(s.leaderKick)
	}
}

// Sidelined reports whether any reason keeps this replica from leading.
func (s *Shard) Sidelined() bool { return s.sidelined.Load() }

// Sidelines lists the reasons this replica is kept from leading, sorted.
func (s *Shard) Sidelines() []string {
	s.sideMu.Lock()
	defer s.sideMu.Unlock()
	return slices.Sorted(maps.Keys(s.sidelines))
}

// Gate is the raft gate of this replica (Config.Gate, or its own).
func (s *Shard) Gate() *raftmux.Gate { return s.gate }
