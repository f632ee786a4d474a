package cluster

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/meta/metapb"
)

// Dead-node replacement is a duty of the meta leader, as Consul's
// autopilot cleans up dead servers: a member (a node the shard map places
// replicas on, or a server of the meta configuration) that has been
// continuously not alive in gossip for DeadNodeGrace gets a drain recorded
// for it (meta DrainNode, no target), which the move executor carries out
// like remove-node: each of its replicas is re-created on the live node
// with the fewest replicas that lacks the shard, then it leaves the meta
// configuration and its id is retired.
//
// The clock is "continuously not alive since", kept by the meta leader in
// memory: one gossip failure (a suspect, a flap) resets it as soon as the
// member is seen alive again, and a new meta leader (or the same node in a
// new term) starts every clock afresh, so a leader change only ever delays
// a replacement, never hastens it.
//
// A drain is recorded only when it can complete without weakening any
// group: every shard of the dead node must have a live eligible node that
// does not hold it (so no shard drops below its replication factor and no
// node holds two replicas of one shard), and a quorum of its voters alive
// besides the dead one. A move adds before it removes: on a 3-replica
// group with one dead replica, the new replica joins as a nonvoter (2 of
// 3 voters alive, a quorum), is promoted (4 voters, 3 alive: still a
// quorum) and only then is the dead one removed. A group that has lost
// its quorum cannot take any change, so the drain waits and says why.

const (
	// deadNodeLogEvery rate-limits the "cannot replace" line per node.
	deadNodeLogEvery = time.Minute
	// deadNodeWarnAfter is how long a member is away before the leader
	// says so (or half the grace, if shorter).
	deadNodeWarnAfter = 10 * time.Second
)

// deadNodes is the meta leader's state for dead-node replacement; only
// metaDutiesLoop touches it.
type deadNodes struct {
	term   uint64 // meta term the clocks were started in
	since  map[string]time.Time
	warned map[string]bool
	logged map[string]deadLog
	// aborts rate-limits the "cannot record the abort" line per shard.
	aborts map[uint32]time.Time
}

type deadLog struct {
	at     time.Time
	reason string
}

func newDeadNodes() *deadNodes {
	return &deadNodes{since: map[string]time.Time{}, warned: map[string]bool{}, logged: map[string]deadLog{}, aborts: map[uint32]time.Time{}}
}

// reset forgets every clock: this node does not lead meta, or leads it in
// a new term.
func (d *deadNodes) reset(term uint64) {
	d.term = term
	clear(d.since)
	clear(d.warned)
	clear(d.logged)
	clear(d.aborts)
}

// replaceDeadNodes runs on the meta leader every duty round.
func (n *Node) replaceDeadNodes(ctx context.Context) {
	if n.cfg.DeadNodeGrace < 0 {
		return
	}
	d := n.dead
	if term := n.meta.Raft().CurrentTerm(); term != d.term {
		d.reset(term)
	}
	m := n.meta.ShardMap()
	if !m.Placed() {
		return
	}
	members, err := n.members(m)
	if err != nil {
		return
	}
	alive := map[string]bool{}
	for _, mem := range n.gossip.list() {
		if mem.State == "alive" {
			alive[mem.NodeID] = true
		}
	}
	now := time.Now()
	var notAlive []string
	for _, id := range members {
		if alive[id] || id == n.cfg.NodeID {
			delete(d.since, id)
			delete(d.logged, id)
			delete(d.warned, id)
			continue
		}
		notAlive = append(notAlive, id)
		since, ok := d.since[id]
		if !ok {
			since = now
			d.since[id] = now
		}
		// Said once the absence is more than a blip (a leader that has
		// just started has not heard every member yet).
		if !d.warned[id] && now.Sub(since) >= min(n.cfg.DeadNodeGrace/2, deadNodeWarnAfter) {
			d.warned[id] = true
			n.logger.Warn("dead node: a member is not alive; it is replaced if it stays away for the grace period",
				"member", id, "away_for", now.Sub(since).Round(time.Second), "grace", n.cfg.DeadNodeGrace)
		}
	}
	for id := range d.since {
		if !slices.Contains(notAlive, id) {
			delete(d.since, id) // no longer a member
			delete(d.warned, id)
		}
	}
	n.abortDeadTargets(ctx, m, d, now)
	if len(m.Drains) > 0 {
		return // one drain at a time: the checks below assume no other moves out
	}
	for _, id := range notAlive {
		if now.Sub(d.since[id]) < n.cfg.DeadNodeGrace {
			continue
		}
		cfg, err := n.metaConfiguration()
		if err != nil {
			return
		}
		if why := n.cannotReplace(m, cfg, id, notAlive); why != "" {
			if l := d.logged[id]; l.reason != why || now.Sub(l.at) >= deadNodeLogEvery {
				d.logged[id] = deadLog{at: now, reason: why}
				n.logger.Error("dead node: cannot replace it; its replicas stay where they are", "member", id,
					"dead_for", now.Sub(d.since[id]).Round(time.Second), "reason", why)
			}
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = n.meta.DrainNode(cctx, id, "")
		cancel()
		if err != nil {
			n.logger.Warn("dead node: recording its drain", "member", id, "err", err)
			return
		}
		n.logger.Warn("dead node: replacing it: its replicas are re-created on live nodes, then its id is retired",
			"member", id, "dead_for", now.Sub(d.since[id]).Round(time.Second), "shards", m.ShardsOf(id))
		return
	}
}

// members are the nodes the map places replicas on and the servers of the
// meta configuration, retired ones excepted.
func (n *Node) members(m meta.ShardMap) ([]string, error) {
	f := n.meta.Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("meta configuration: %w", err)
	}
	var out []string
	add := func(id string) {
		if id != "" && !m.IsRetired(id) && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	for _, s := range f.Configuration().Servers {
		add(string(s.ID))
	}
	for id := uint32(0); id < m.Count; id++ {
		for _, node := range m.Replicas[id] {
			add(node)
		}
		for _, node := range m.Learners[id] {
			add(node)
		}
	}
	slices.Sort(out)
	return out, nil
}

// cannotReplace says why draining dead (one of notAlive) cannot complete
// safely now, or "" if it can.
func (n *Node) cannotReplace(m meta.ShardMap, cfg raft.Configuration, dead string, notAlive []string) string {
	if slices.ContainsFunc(m.Drains, func(d meta.Drain) bool { return d.To == dead }) {
		return "it is the target of a running drain"
	}
	for _, mv := range m.Moves {
		if mv.To != dead {
			continue
		}
		if mv.Phase == metapb.MovePhase_MOVE_PHASE_ADD {
			// abortDeadTargets aborted it or is about to; the next
			// round finds it gone.
			return fmt.Sprintf("the move of shard %d onto it is being aborted", mv.Shard)
		}
		// Promoted: it votes, so the move can only run forward.
		return fmt.Sprintf("a move of shard %d onto it is promoted and cannot finish while it is away: bring it back", mv.Shard)
	}
	targets := slices.DeleteFunc(n.drainTargets(m, cfg), func(id string) bool { return id == dead })
	for _, id := range m.ShardsOf(dead) {
		if leastLoaded(m, id, slices.Clone(targets)) == "" {
			return fmt.Sprintf("no live node can take shard %d: each of the %d live eligible nodes already holds it "+
				"(add a node, or bring %s back)", id, len(targets), dead)
		}
		voters := m.Replicas[id]
		up := 0
		for _, v := range voters {
			if !slices.Contains(notAlive, v) {
				up++
			}
		}
		if up < len(voters)/2+1 {
			return fmt.Sprintf("shard %d has %d of %d voters alive, not a quorum: no replica can be added or removed until more of them return", id, up, len(voters))
		}
	}
	return ""
}

// metaVoterToPromote picks a live meta nonvoter to take a drained voter's
// place when the drain names no replacement, so the meta group keeps its
// number of voters; nil if there is none.
func (n *Node) metaVoterToPromote(m meta.ShardMap, cfg raft.Configuration, drained string) *raft.Server {
	if c := n.promotableNonvoters(m, cfg, drained); len(c) > 0 {
		return &c[0]
	}
	return nil
}

// promotableNonvoters are the meta nonvoters that may become voters: alive
// for the nonvoter grace, not retired, not draining, not drained.
func (n *Node) promotableNonvoters(m meta.ShardMap, cfg raft.Configuration, drained string) []raft.Server {
	targets := n.drainTargets(m, cfg)
	var out []raft.Server
	for _, s := range cfg.Servers {
		id := string(s.ID)
		if s.Suffrage == raft.Nonvoter && id != drained && slices.Contains(targets, id) && n.gossip.aliveFor(id, n.cfg.NonvoterGrace) {
			out = append(out, s)
		}
	}
	return out
}
