package cluster

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/meta/metapb"
	"github.com/raftq/raftq/raftgroup"
)

// A drain (remove-node, replace-node) is recorded in meta and carried out
// by the meta leader's move executor (cluster/moves.go), so it survives a
// leader change: while the node holds a replica, the executor starts the
// move of one of them; once it holds none, the node leaves the meta
// configuration (its replacement promoted to a meta voter first) and its
// id is retired.

// advanceDrain starts the next move of d, or finishes it.
func (n *Node) advanceDrain(ctx context.Context, m meta.ShardMap, d meta.Drain) error {
	shards := m.ShardsOf(d.Node)
	if len(shards) == 0 {
		return n.finishDrain(ctx, d)
	}
	id := shards[0]
	to := d.To
	if to == "" || m.Hosts(id, to) {
		// The replacement may hold the shard already (the rebalancer gave
		// it a replica before the drain was recorded): this replica then
		// goes where remove-node would send it.
		cfg, err := n.metaConfiguration()
		if err != nil {
			return err
		}
		to = leastLoaded(m, id, n.drainTargets(m, cfg))
		if to == "" {
			return fmt.Errorf("drain %s: no node can take shard %d: every member that may hold a replica (admitted to meta, up for the nonvoter grace) holds it already", d.Node, id)
		}
	}
	tm, ok := n.gossip.get(to)
	if !ok || tm.RaftAddr == "" {
		return fmt.Errorf("drain %s: target %s is not a live member", d.Node, to)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := n.meta.MoveStep(ctx, id, d.Node, to, tm.RaftAddr, metapb.MovePhase_MOVE_PHASE_ADD); err != nil {
		return err
	}
	n.logger.Info("replica move: started", "shard", id, "from", d.Node, "to", to)
	return nil
}

// drainTargets are the members that may take a replica: servers of the
// meta configuration cfg (a node that never proved its identity is not
// one, and would never open the replica), alive in gossip for the
// nonvoter grace with a raft address, not retired, not draining.
func (n *Node) drainTargets(m meta.ShardMap, cfg raft.Configuration) []string {
	inMeta := map[string]bool{}
	for _, s := range cfg.Servers {
		inMeta[string(s.ID)] = true
	}
	var out []string
	for _, mem := range n.gossip.alive() {
		id := mem.NodeID
		if !inMeta[id] || mem.RaftAddr == "" || !n.gossip.aliveFor(id, n.cfg.NonvoterGrace) || m.IsRetired(id) ||
			slices.ContainsFunc(m.Drains, func(d meta.Drain) bool { return d.Node == id }) {
			continue
		}
		out = append(out, id)
	}
	return out
}

// metaConfiguration is the meta group's latest configuration.
func (n *Node) metaConfiguration() (raft.Configuration, error) {
	f := n.meta.Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		return raft.Configuration{}, fmt.Errorf("meta configuration: %w", err)
	}
	return f.Configuration(), nil
}

// leastLoaded picks, among candidates, the node with the fewest replicas
// that does not hold shard; ties go to the lowest id.
func leastLoaded(m meta.ShardMap, shard uint32, candidates []string) string {
	best, bestN := "", 0
	slices.Sort(candidates)
	for _, c := range candidates {
		if m.Hosts(shard, c) {
			continue
		}
		if k := len(m.ShardsOf(c)); best == "" || k < bestN {
			best, bestN = c, k
		}
	}
	return best
}

// finishDrain removes the drained node from the meta configuration and
// retires its id. If it was a meta voter, its replacement is promoted
// first, so the meta group keeps its number of voters; a drain without a
// replacement promotes a live meta nonvoter when the remaining voters
// would otherwise be even.
func (n *Node) finishDrain(ctx context.Context, d meta.Drain) error {
	if d.Node == n.cfg.NodeID {
		// This node leads meta: hand leadership over and let the next
		// leader remove it.
		return n.meta.TransferLeadership(ctx)
	}
	r := n.meta.Raft()
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		return fmt.Errorf("meta configuration: %w", err)
	}
	var old, repl *raft.Server
	for _, s := range f.Configuration().Servers {
		switch string(s.ID) {
		case d.Node:
			old = &s
		case d.To:
			repl = &s
		}
	}
	if old != nil && old.Suffrage == raft.Voter && (repl == nil || repl.Suffrage == raft.Voter) && remainingVoters(f.Configuration(), d.Node)%2 == 0 {
		// No replacement that adds a voter (remove-node, a dead node, or
		// a replacement that votes already) and removing it would leave
		// an even number of voters, which tolerates no more failures than
		// one fewer: a live meta nonvoter, if any, is promoted first. Once
		// it is, the count is odd and the next round removes the drained
		// node. If none is live now, topUpMetaVoters promotes one later.
		repl = n.metaVoterToPromote(n.meta.ShardMap(), f.Configuration(), d.Node)
	}
	if old != nil && old.Suffrage == raft.Voter && repl != nil && repl.Suffrage != raft.Voter {
		n.logger.Info("meta: promoting a nonvoter to voter", "node", repl.ID, "replaces", d.Node)
		if err := raftgroup.WaitFuture(ctx, r.AddVoter(repl.ID, repl.Address, f.Index(), groupChangeWait), nil); err != nil {
			return fmt.Errorf("promote %s in meta: %w", repl.ID, err)
		}
		return nil // the next round removes the old one from the new configuration
	}
	if old != nil {
		n.logger.Warn("meta: removing a drained node", "node", d.Node)
		if err := raftgroup.WaitFuture(ctx, r.RemoveServer(old.ID, f.Index(), groupChangeWait), nil); err != nil {
			return fmt.Errorf("remove %s from meta: %w", d.Node, err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := n.meta.RetireNode(ctx, d.Node); err != nil {
		return err
	}
	n.logger.Warn("node drained, removed and retired: its id is refused if it comes back", "node", d.Node)
	return nil
}

// remainingVoters counts the voters of cfg other than node.
func remainingVoters(cfg raft.Configuration, node string) int {
	k := 0
	for _, s := range cfg.Servers {
		if s.Suffrage == raft.Voter && string(s.ID) != node {
			k++
		}
	}
	return k
}
