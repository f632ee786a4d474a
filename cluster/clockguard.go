package cluster

import (
	"context"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/clockskew"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/raftmux"
	"github.com/raftq/raftq/shard"
)

// Reasons the clock check sidelines this node's raft groups with
// (shard.Shard.Sideline, meta.Store.Sideline).
const (
	// reasonClockSkew: the clock is beyond the bound (clockskew.Beyond).
	reasonClockSkew = "clock-skew"
	// reasonClockUnchecked: not yet compared with the peers
	// (clockskew.Unchecked): a node started with a wrong clock must not
	// win an election before it has measured anyone.
	reasonClockUnchecked = "clock-unchecked"
)

const (
	// clockWindow samples per peer; with the 500 ms probe interval each
	// peer of a 3-node cluster is probed about once a second.
	clockWindow = 7
	// clockTTL forgets a peer's samples once it stops answering probes.
	clockTTL = 30 * time.Second
	// clockStep is how often the judge looks.
	clockStep = 500 * time.Millisecond
	// clockTransferEvery spaces transfers away from a group this node
	// still leads while it may not.
	clockTransferEvery = 5 * time.Second
	// clockUncheckedWarn: still unchecked this long after start is
	// worth a warning (no peer answers probes with a clock).
	clockUncheckedWarn = 30 * time.Second
)

// clockGuard runs the clock check of one node: it measures the peers'
// clocks from memberlist probe acks (gossipDelegate), judges whether this
// node's clock is within Config.MaxClockOffset of the cluster's median
// clock, and keeps every local raft group from leading while it is not
// (or before it knows).
type clockGuard struct {
	n     *Node
	now   func() time.Time // the node's clock: the one it stamps entries with
	bound time.Duration
	est   *clockskew.Estimator
	judge *clockskew.Judge // loop goroutine only

	joined atomic.Bool  // gossip joined a seed, or there is none to join
	state  atomic.Int32 // clockskew.State

	// applyMu serialises applying the state to raft groups, so a shard
	// opened during a change ends up with the new state (see holdGate).
	applyMu sync.Mutex

	statusMu sync.Mutex
	status   clockskew.Status

	transferred map[string]time.Time // loop goroutine only
	heldAt      time.Time            // loop goroutine only: when the last change to a holding state was applied
}

func newClockGuard(n *Node) *clockGuard {
	g := &clockGuard{
		n: n, now: n.cfg.Now, bound: n.cfg.MaxClockOffset,
		est:         clockskew.NewEstimator(clockWindow, clockTTL),
		judge:       clockskew.NewJudge(clockskew.Config{Bound: n.cfg.MaxClockOffset}),
		transferred: map[string]time.Time{},
	}
	g.status = clockskew.Status{State: clockskew.Unchecked, Bound: g.bound}
	return g
}

// State is the current verdict.
func (g *clockGuard) State() clockskew.State { return clockskew.State(g.state.Load()) }

// holds reports whether this node must not lead.
func (g *clockGuard) holds() bool { return g.State() != clockskew.Within }

func reasonFor(s clockskew.State) string {
	switch s {
	case clockskew.Unchecked:
		return reasonClockUnchecked
	case clockskew.Beyond:
		return reasonClockSkew
	}
	return ""
}

// observe records one probe ack from peer (memberlist's goroutine).
func (g *clockGuard) observe(peer string, payload []byte, rtt time.Duration) {
	remote, err := clockskew.DecodeClock(payload)
	if err != nil {
		return
	}
	g.est.Add(peer, clockskew.Measure(remote, g.now(), rtt, time.Now()))
}

// holdGate holds a new group's gate before its raft starts, so it cannot
// campaign in the moment before applyShard or applyMeta. Call with applyMu
// held.
func (g *clockGuard) holdGate(gate *raftmux.Gate) {
	if r := reasonFor(g.State()); r != "" {
		gate.Hold(r, raftmux.HoldCampaign)
	}
}

// applyShard brings a shard in line with the state. Beyond sidelines it
// (its leader duties end and it hands leadership away, with a warning);
// Unchecked, which only a starting node is in, holds its gate alone: it
// cannot have been elected yet, and a warning per group on every start
// would only teach operators to ignore the real one.
func (g *clockGuard) applyShard(s *shard.Shard) {
	st := g.State()
	if st == clockskew.Beyond {
		s.Sideline(reasonClockSkew, raftmux.HoldCampaign)
	} else {
		s.Unsideline(reasonClockSkew)
	}
	holdIf(s.Gate(), reasonClockUnchecked, st == clockskew.Unchecked)
}

// applyMeta does the same for the meta replica.
func (g *clockGuard) applyMeta() {
	st := g.State()
	if st == clockskew.Beyond {
		g.n.meta.Sideline(reasonClockSkew)
	} else {
		g.n.meta.Unsideline(reasonClockSkew)
	}
	holdIf(g.n.metaGate, reasonClockUnchecked, st == clockskew.Unchecked)
}

func holdIf(gate *raftmux.Gate, reason string, hold bool) {
	if hold {
		gate.Hold(reason, raftmux.HoldCampaign)
	} else {
		gate.Release(reason)
	}
}

// loop judges every clockStep until ctx ends.
func (g *clockGuard) loop(ctx context.Context) {
	started := time.Now()
	warned := false
	tick := time.NewTicker(clockStep)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		v := g.step()
		if v.State == clockskew.Unchecked && !warned && time.Since(started) > clockUncheckedWarn {
			warned = true
			g.n.logger.Warn("clock not yet compared with enough peers: this node does not lead until it is (are the peers' gossip ports reachable, and do they run a version that reports its clock?)",
				"members", v.Members, "measured", v.Measured, "gossip_joined", g.joined.Load())
		}
		if g.holds() {
			g.moveLeadershipAway(ctx)
		}
	}
}

// step runs the judge once and applies a change of state.
func (g *clockGuard) step() clockskew.Verdict {
	now := time.Now()
	ests := g.est.Estimates(now)
	var peers []string
	for _, m := range g.n.gossip.alive() {
		if m.NodeID != g.n.cfg.NodeID {
			peers = append(peers, m.NodeID)
		}
	}
	slices.Sort(peers)
	v := g.judge.Step(clockskew.View{Compared: g.joined.Load() || len(peers) > 0, Peers: peers, Estimates: ests}, now)
	live := make(map[string]clockskew.Estimate, len(peers))
	for _, p := range peers {
		if e, ok := ests[p]; ok {
			live[p] = e
		}
	}
	g.statusMu.Lock()
	g.status = clockskew.Status{State: v.State, Offset: v.Offset, Bound: g.bound, Peers: live}
	g.statusMu.Unlock()
	if !v.Changed {
		return v
	}
	g.applyMu.Lock()
	g.state.Store(int32(v.State))
	g.applyMeta()
	for _, s := range g.n.shards.all() {
		g.applyShard(s)
	}
	g.applyMu.Unlock()
	g.n.gossip.announce()
	g.heldAt = now
	attrs := []any{"offset", v.Offset, "bound", g.bound, "members", v.Members, "measured", v.Measured, "peers", offsetsOf(live)}
	switch v.State {
	case clockskew.Beyond:
		g.n.logger.Warn("clock offset beyond the bound: this node will not lead any raft group until its clock is back within it; fix its time sync (NTP/chrony) or raise --max-clock-offset on every node", attrs...)
	case clockskew.Within:
		g.n.logger.Info("clock within the bound: this node may lead", attrs...)
	}
	return v
}

func offsetsOf(es map[string]clockskew.Estimate) map[string]string {
	out := make(map[string]string, len(es))
	for p, e := range es {
		out[p] = e.Offset.String() + "±" + e.Uncertainty.String()
	}
	return out
}

// Status is the latest verdict with the peers' estimates.
func (g *clockGuard) Status() clockskew.Status {
	g.statusMu.Lock()
	defer g.statusMu.Unlock()
	st := g.status
	st.Peers = maps.Clone(st.Peers)
	return st
}

// moveLeadershipAway transfers every group this node still leads in raft
// to a voter that may lead. Sideline already asks raft once, but raft
// picks the most caught-up follower, which may itself be held (its
// TimeoutNow refused); a leader stuck that way serves nothing.
func (g *clockGuard) moveLeadershipAway(ctx context.Context) {
	type group struct {
		name string
		r    *raft.Raft
	}
	groups := []group{{metaGroup, g.n.meta.Raft()}}
	for _, s := range g.n.shards.all() {
		groups = append(groups, group{shard.GroupName(s.ID()), s.Raft()})
	}
	now := time.Now()
	if now.Sub(g.heldAt) < clockTransferEvery {
		// Sideline has just asked raft for a transfer of its own; give
		// it time rather than race it.
		return
	}
	for _, gr := range groups {
		if gr.r.State() != raft.Leader || now.Sub(g.transferred[gr.name]) < clockTransferEvery {
			continue
		}
		id, addr, ok := g.eligibleVoter(gr.r)
		if !ok {
			continue
		}
		g.transferred[gr.name] = now
		g.n.logger.Info("clock check: moving leadership away", "group", gr.name, "to", id)
		go func() {
			tctx, cancel := context.WithTimeout(ctx, clockTransferEvery)
			defer cancel()
			if err := raftgroup.WaitFuture(tctx, gr.r.LeadershipTransferToServer(id, addr), nil); err != nil {
				g.n.logger.Warn("clock check: leadership transfer failed", "group", gr.name, "to", id, "err", err)
			}
		}()
	}
}

// eligibleVoter is a voter of r other than this node that gossip shows
// alive and not held by its own clock check.
func (g *clockGuard) eligibleVoter(r *raft.Raft) (raft.ServerID, raft.ServerAddress, bool) {
	f := r.GetConfiguration()
	if f.Error() != nil {
		return "", "", false
	}
	for _, srv := range f.Configuration().Servers {
		if srv.Suffrage != raft.Voter || string(srv.ID) == g.n.cfg.NodeID {
			continue
		}
		if g.n.gossip.mayLead(string(srv.ID)) {
			return srv.ID, srv.Address, true
		}
	}
	return "", "", false
}
