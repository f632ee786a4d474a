package cluster

import (
	"context"

	"github.com/raftq/raftq/raftgroup"
)

// topUpMetaVoters promotes a live meta nonvoter while the meta group has an
// even number of voters, or a single voter and two nonvoters to make
// three. An even count tolerates no more failures than one fewer, and
// nothing else gives back a voter that a drain removed without promoting
// one: finishDrain promotes only nonvoters alive for the grace at that
// moment. It waits while a drain runs, which promotes and removes in steps
// of its own, and promotes one server per pass (the configuration index
// it read is stale after a change).
func (n *Node) topUpMetaVoters(ctx context.Context) {
	m := n.meta.ShardMap()
	if len(m.Drains) > 0 {
		return
	}
	r := n.meta.Raft()
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		return
	}
	cfg := f.Configuration()
	voters := remainingVoters(cfg, "")
	cands := n.promotableNonvoters(m, cfg, "")
	if !needsMetaVoter(voters, len(cands)) {
		return
	}
	s := cands[0]
	n.logger.Warn("meta: promoting a nonvoter: the meta group has too few voters", "node", s.ID, "voters", voters)
	if err := raftgroup.WaitFuture(ctx, r.AddVoter(s.ID, s.Address, f.Index(), groupChangeWait), nil); err != nil {
		n.logger.Warn("meta: promoting a nonvoter", "node", s.ID, "err", err)
	}
}

// needsMetaVoter is the rule of topUpMetaVoters: promote when the voters
// are even, or when one voter and two candidates make three (two voters
// would need both up, worse than one).
func needsMetaVoter(voters, candidates int) bool {
	switch {
	case candidates == 0:
		return false
	case voters%2 == 0:
		return true
	default:
		return voters < 3 && candidates >= 3-voters
	}
}
