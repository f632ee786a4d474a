package cluster

import (
	"context"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/shard"
)

// handOffBackoff spaces attempts after a failed transfer.
const handOffBackoff = 30 * time.Second

// handOff moves a shard's leadership to its preferred replica. Elections
// pick whichever replica times out first, so without it one node tends to
// lead most shards and carries most of the write load; the map's first
// replica is spread evenly by rendezvous hashing.
type handOff struct {
	n         *Node
	id        uint32
	s         *shard.Shard
	since     time.Time // when this replica last became a ready leader
	notBefore time.Time
}

func (h *handOff) leading(ready bool) {
	if ready {
		h.since = time.Now()
	} else {
		h.since = time.Time{}
	}
}

// maybe transfers leadership when this node has led long enough, is not the
// preferred replica, and the preferred replica has been alive in gossip for
// the nonvoter grace. It reports whether it started a transfer.
func (h *handOff) maybe(ctx context.Context) bool {
	now := time.Now()
	if h.since.IsZero() || now.Sub(h.since) < h.n.cfg.PreferredLeaderDelay || now.Before(h.notBefore) {
		return false
	}
	reps := h.n.meta.ShardMap().Replicas[h.id]
	if len(reps) < 2 || reps[0] == h.n.cfg.NodeID {
		return false
	}
	target := reps[0]
	var addr raft.ServerAddress
	f := h.s.Raft().GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, srv := range f.Configuration().Servers {
		if string(srv.ID) == target && srv.Suffrage == raft.Voter {
			addr = srv.Address
		}
	}
	// A target held by its clock check would refuse the transfer
	// (TimeoutNow), and must not lead anyway.
	if addr == "" || !h.n.gossip.aliveFor(target, h.n.cfg.NonvoterGrace) || !h.n.gossip.mayLead(target) {
		return false
	}
	h.notBefore = now.Add(handOffBackoff)
	h.n.logger.Info("handing shard leadership to its preferred replica", "shard", h.id, "to", target)
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := raftgroup.WaitFuture(tctx, h.s.Raft().LeadershipTransferToServer(raft.ServerID(target), addr), nil); err != nil {
		h.n.logger.Warn("shard leadership hand-off failed", "shard", h.id, "to", target, "err", err)
		return false
	}
	return true
}
