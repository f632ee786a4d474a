package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/meta/metapb"
	"github.com/raftq/raftq/raftgroup"
)

// Rebalancing is a duty of the meta leader. Once the cluster has been
// stable for Config.RebalanceStable (the same eligible nodes and meta
// servers all along) and no move or drain runs, it takes the first step
// of the balance plan (meta.PlanBalance): it records a replica move's add
// phase, which the move executor (moves.go) carries through, or a
// preferred-leader change (PreferLeader), which the shard's leader then
// follows (handoff.go). Each step is recorded in meta before anything acts
// on it and the plan is recomputed from the map every time, so a new meta
// leader simply carries on. Drains go first: none of this runs while one
// does.

// ErrDraining is returned by Rebalance while a drain runs.
var ErrDraining = errors.New("a node is being drained")

// rebalancer is the meta leader's rebalancing state; none of it is
// replicated: a new meta leader starts waiting for stability afresh.
type rebalancer struct {
	mu sync.Mutex
	// term is the meta term this state belongs to: a leader that lost
	// meta and won it back did not watch membership in between, and an
	// operator's request was made to whoever led then.
	term        uint64
	fingerprint string    // the eligible nodes and meta servers last seen
	since       time.Time // when they last changed
	termStart   time.Time // when this node began to lead term
	next        time.Time // rate limit: no step before
	// forced: an operator asked (Rebalance without dry run): rebalance now,
	// automatic or not, until the plan is empty.
	forced bool
	// waiting is why the last step could not be taken, logged once per
	// reason: a node that stays down would repeat it every second.
	waiting oncePerReason
	// topUps is why top-ups waited while moves went on, likewise.
	topUps oncePerReason
}

// newTerm starts afresh in a new meta term; r.mu is held.
func (r *rebalancer) newTerm(term uint64, now time.Time) {
	if term == r.term {
		return
	}
	r.term, r.fingerprint, r.since, r.next, r.forced = term, "", now, time.Time{}, false
	r.termStart = now
	r.waiting.reset()
	r.topUps.reset()
}

// RebalanceStatus is the plan as the meta leader sees it.
type RebalanceStatus struct {
	Plan      meta.BalancePlan
	Started   bool   // a step is under way or was just recorded
	Moving    string // the running move, "" if none
	Automatic bool
}

// rebalanceDuty is called on every pass of the meta duties loop.
func (n *Node) rebalanceDuty(ctx context.Context) {
	if !isDone(n.verifiedCh()) {
		return
	}
	m := n.meta.ShardMap()
	if !m.Placed() {
		return
	}
	elig, servers, err := n.balanceEligible(m)
	if err != nil {
		return
	}
	r := &n.balance
	r.mu.Lock()
	now := time.Now()
	r.newTerm(n.meta.Raft().CurrentTerm(), now)
	if fp := strings.Join(elig, ",") + "|" + strings.Join(servers, ","); fp != r.fingerprint {
		r.fingerprint, r.since = fp, now
	}
	// A new meta leader may owe its term to a node that just died, which
	// gossip declares only after its suspicion timeout: no move starts
	// before gossip has had that long to say which nodes are down
	// (rebalanceStep skips shards with a replica on one). Top-ups restore
	// the replication the cluster promises, so they wait for neither the
	// stability nor an operator; moves and leader changes do.
	due := now.After(r.next) && now.Sub(r.termStart) >= gossipDeadAfter
	balance := due && (r.forced || (!n.cfg.DisableRebalance && now.Sub(r.since) >= n.cfg.RebalanceStable))
	r.mu.Unlock()
	if !due || len(m.Moves) > 0 || len(m.Drains) > 0 || (!balance && !anyShort(m, n.cfg.Replication)) {
		return // nothing to plan: the planner is not run every pass for nothing
	}
	plan := meta.PlanBalance(m, elig, n.cfg.Replication)
	if !balance {
		plan.Moves, plan.Leaders = nil, nil
	}
	if plan.Empty() {
		r.mu.Lock()
		if r.forced && balance {
			n.logger.Info("rebalance: balanced")
			r.forced = false
		}
		r.mu.Unlock()
		return
	}
	r.mu.Lock()
	r.next = now.Add(moveEvery)
	r.mu.Unlock()
	err = n.rebalanceStep(ctx, m, elig, plan)
	if r.waiting.changed(err) && ctx.Err() == nil {
		n.logger.Info("rebalance: not yet", "err", err)
	}
}

// rebalanceStep records the plan's first step that can be taken now.
func (n *Node) rebalanceStep(ctx context.Context, m meta.ShardMap, elig []string, plan meta.BalancePlan) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if len(plan.TopUps) == 0 {
		return n.balanceStep(ctx, m, plan)
	}
	why := n.topUpStep(ctx, m, elig)
	if why == nil {
		return nil // one started
	}
	if len(plan.Moves) == 0 && len(plan.Leaders) == 0 {
		return why
	}
	// Said once per reason: the moves below succeed and report nothing.
	if n.balance.topUps.changed(why) {
		n.logger.Info("rebalance: top-ups wait; balancing goes on without them", "why", why)
	}
	// The plan's moves and leader changes assume its top-ups done: planned
	// again without them, they are steps the map allows now.
	rest := meta.PlanBalance(m, elig, 0)
	if rest.Empty() {
		return why
	}
	return n.balanceStep(ctx, m, rest)
}

// topUpStep starts the first top-up it can and returns nil, or says why
// none can start. Top-ups are planned over the eligible nodes alive for
// RebalanceStable only: a top-up does not wait for membership to settle,
// but its target must have, or one that flaps would leave it stuck in add
// (and every move and drain behind it) until the dead-node grace aborts
// it; and a shard on one replica is topped up only if settled nodes can
// take it to three (meta.PlanBalance).
func (n *Node) topUpStep(ctx context.Context, m meta.ShardMap, elig []string) error {
	var settled []string
	for _, id := range elig {
		if n.gossip.aliveFor(id, n.cfg.RebalanceStable) {
			settled = append(settled, id)
		}
	}
	ups := meta.PlanBalance(m, settled, n.cfg.Replication).TopUps
	if len(ups) == 0 {
		return fmt.Errorf("top-ups wait for their targets to be alive for %v", n.cfg.RebalanceStable)
	}
	for _, mv := range ups {
		err := n.startMove(ctx, m, mv)
		switch {
		case errors.Is(err, errNotNow):
			continue
		case err != nil:
			// A refusal (a meta replica below log format 9, say) holds
			// for every top-up alike.
			return err
		}
		n.logger.Info("rebalance: replica top-up started: the shard has fewer replicas than --replication", "shard", mv.Shard, "to", mv.To,
			"replicas", len(m.Replicas[mv.Shard]), "replication", n.cfg.Replication, "top_ups_left", len(ups)-1)
		n.balance.topUps.reset()
		return nil
	}
	return errors.New("top-ups wait: a replica of each short shard, or its target, is not alive")
}

// anyShort reports whether a shard of m has fewer replicas than
// replication.
func anyShort(m meta.ShardMap, replication int) bool {
	for id := range m.Count {
		if len(m.Replicas[id]) < replication {
			return true
		}
	}
	return false
}

// errNotNow: a planned move waits (a replica of the shard or the target
// is not alive).
var errNotNow = errors.New("not now")

// startMove records the add phase of a planned move or top-up, unless
// the shard has a replica on a node that is down (it would have no voter
// to spare while the move runs: 4 voters, 3 up) or the target is not a
// live member; those wait (errNotNow).
func (n *Node) startMove(ctx context.Context, m meta.ShardMap, mv meta.PlannedMove) error {
	if !n.allAlive(m.Replicas[mv.Shard]) {
		return errNotNow
	}
	tm, ok := n.gossip.get(mv.To)
	if !ok || tm.RaftAddr == "" {
		return errNotNow
	}
	return n.meta.MoveStep(ctx, mv.Shard, mv.From, mv.To, tm.RaftAddr, metapb.MovePhase_MOVE_PHASE_ADD)
}

// balanceStep records the first replica move or leader change of the
// plan that can be taken now.
func (n *Node) balanceStep(ctx context.Context, m meta.ShardMap, plan meta.BalancePlan) error {
	if len(plan.Moves) > 0 {
		for _, mv := range plan.Moves {
			err := n.startMove(ctx, m, mv)
			if errors.Is(err, errNotNow) {
				continue
			}
			if err != nil {
				return err
			}
			n.logger.Info("rebalance: replica move started", "shard", mv.Shard, "from", mv.From, "to", mv.To, "moves_left", len(plan.Moves)-1)
			return nil
		}
		return errors.New("every planned move is of a shard with a replica on a node that is not alive")
	}
	lc := plan.Leaders[0]
	if err := n.meta.PreferLeader(ctx, lc.Shard, lc.To); err != nil {
		return err
	}
	n.logger.Info("rebalance: preferred leader changed", "shard", lc.Shard, "from", lc.From, "to", lc.To, "changes_left", len(plan.Leaders)-1)
	return nil
}

func (n *Node) allAlive(nodes []string) bool {
	for _, id := range nodes {
		if m, ok := n.gossip.get(id); !ok || m.State != "alive" {
			return false
		}
	}
	return true
}

// balanceEligible lists the nodes that may hold replicas, and the meta
// servers: members of the meta group alive in gossip for the grace
// period, with a raft address, not retired, not draining or the target of
// a drain, and not held by their clock check.
func (n *Node) balanceEligible(m meta.ShardMap) (eligible, servers []string, err error) {
	f := n.meta.Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, nil, fmt.Errorf("meta configuration: %w", err)
	}
	inMeta := map[string]bool{}
	for _, s := range f.Configuration().Servers {
		inMeta[string(s.ID)] = true
		servers = append(servers, string(s.ID)+"="+suffrageName(s.Suffrage))
	}
	slices.Sort(servers)
	for _, mem := range n.gossip.alive() {
		id := mem.NodeID
		switch {
		case !inMeta[id], mem.RaftAddr == "", m.IsRetired(id),
			slices.ContainsFunc(m.Drains, func(d meta.Drain) bool { return d.Node == id || d.To == id }),
			!n.gossip.aliveFor(id, n.cfg.NonvoterGrace), !n.gossip.mayLead(id):
			continue
		}
		eligible = append(eligible, id)
	}
	slices.Sort(eligible)
	return eligible, servers, nil
}

func suffrageName(s raft.ServerSuffrage) string {
	if s == raft.Voter {
		return "voter"
	}
	return "nonvoter"
}

// Rebalance reports the balance plan; unless dryRun it also starts
// carrying it out now, ignoring the stability wait and DisableRebalance.
// Only the meta leader answers; elsewhere it returns a
// *raftgroup.NotLeaderError naming the leader.
func (n *Node) Rebalance(dryRun bool) (RebalanceStatus, error) {
	if !n.meta.IsLeader() {
		return RebalanceStatus{}, &raftgroup.NotLeaderError{Group: metaGroup, LeaderID: n.meta.LeaderID()}
	}
	m := n.meta.ShardMap()
	if !m.Placed() {
		return RebalanceStatus{}, errors.New("the shard map is not placed yet")
	}
	elig, _, err := n.balanceEligible(m)
	if err != nil {
		return RebalanceStatus{}, err
	}
	st := RebalanceStatus{Plan: meta.PlanBalance(m, elig, n.cfg.Replication), Automatic: !n.cfg.DisableRebalance}
	for _, mv := range m.Moves {
		st.Moving = mv.String()
	}
	if dryRun {
		return st, nil
	}
	for _, d := range m.Drains {
		return st, fmt.Errorf("%w: %s; rebalancing waits until it is retired", ErrDraining, d.Node)
	}
	if st.Plan.Empty() {
		return st, nil
	}
	r := &n.balance
	r.mu.Lock()
	r.newTerm(n.meta.Raft().CurrentTerm(), time.Now())
	r.forced, r.next = true, time.Time{}
	r.mu.Unlock()
	st.Started = true
	return st, nil
}
