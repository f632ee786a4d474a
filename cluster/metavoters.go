package cluster

import (
	"context"

	"github.com/raftq/raftq/raftgroup"
)

// topUpMetaVoters promotes a live meta nonvoter while the meta group has an
// even number of voters: an even count tolerates no more failures than one
// fewer, and nothing else gives back a voter that a drain removed without
// promoting one (finishDrain promotes only nonvoters alive for the grace
// at that moment). The voters already there are a quorum of the new
// count on their own, so a promoted server still catching up on the log
// delays no commit; that is why a single voter is never joined by a
// second. It waits while a drain runs, which promotes and removes in
// steps of its own, and before the shard map is placed, whose voters
// place it; it promotes one server per pass (the configuration index it
// read is stale after a change).
func (n *Node) topUpMetaVoters(ctx context.Context) {
	m := n.meta.ShardMap()
	if len(m.Drains) > 0 || !m.Placed() {
		return
	}
	r := n.meta.Raft()
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		return
	}
	cfg := f.Configuration()
	voters := remainingVoters(cfg, "")
	if voters == 0 || voters%2 != 0 {
		return
	}
	cands := n.promotableNonvoters(m, cfg, "")
	if len(cands) == 0 {
		return
	}
	s := cands[0]
	n.logger.Warn("meta: promoting a nonvoter: the meta group has an even number of voters", "node", s.ID, "voters", voters)
	if err := raftgroup.WaitFuture(ctx, r.AddVoter(s.ID, s.Address, f.Index(), groupChangeWait), nil); err != nil {
		n.logger.Warn("meta: promoting a nonvoter", "node", s.ID, "err", err)
	}
}
