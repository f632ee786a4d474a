package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/peer/peerpb"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/raftstore"
)

// A damaged replica is repaired the one way raft allows: it is removed
// from its group's configuration (a raft change its leader commits with
// the healthy replicas), its directory is moved aside, and a new, empty
// replica of the same node joins the group as a nonvoter, catches up from
// the leader and is promoted back. It never takes part with what is left
// of its old state.

const (
	groupChangeWait = 10 * time.Second
	rejoinEvery     = time.Second
)

// ChangeGroup applies one membership change to a group this node leads
// and returns the leader's last log index after it. Every op is
// idempotent: removing an absent server, adding a present one or
// promoting a voter changes nothing.
func (n *Node) ChangeGroup(ctx context.Context, group string, op peerpb.GroupChangeRequest_Op, nodeID, raftAddr string) (uint64, error) {
	r, err := n.groupRaft(group)
	if err != nil {
		return 0, err
	}
	if r.State() != raft.Leader {
		_, id := r.LeaderWithID()
		return 0, &raftgroup.NotLeaderError{Group: group, LeaderID: string(id)}
	}
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		return 0, fmt.Errorf("%s configuration: %w", group, err)
	}
	var cur *raft.Server
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == nodeID {
			s := s
			cur = &s
		}
	}
	id, addr := raft.ServerID(nodeID), raft.ServerAddress(raftAddr)
	var fut raft.IndexFuture
	switch op {
	case peerpb.GroupChangeRequest_OP_REMOVE:
		if cur != nil {
			n.logger.Warn("removing a replica from its group (repair or move)", "group", group, "replica", nodeID)
			fut = r.RemoveServer(id, f.Index(), groupChangeWait)
		}
	case peerpb.GroupChangeRequest_OP_ADD_NONVOTER:
		if cur == nil {
			if raftAddr == "" {
				return 0, errors.New("add nonvoter: raft address required")
			}
			if !n.proves(ctx, nodeID, raftAddr) {
				return 0, fmt.Errorf("add nonvoter: %s at %s did not prove its identity", nodeID, raftAddr)
			}
			n.logger.Info("adding a replica to its group as a nonvoter", "group", group, "replica", nodeID, "raft", raftAddr)
			fut = r.AddNonvoter(id, addr, f.Index(), groupChangeWait)
		}
	case peerpb.GroupChangeRequest_OP_PROMOTE:
		switch {
		case cur == nil:
			return 0, fmt.Errorf("promote: %s is not in %s", nodeID, group)
		case cur.Suffrage != raft.Voter:
			n.logger.Info("promoting a caught-up replica to voter", "group", group, "replica", nodeID)
			fut = r.AddVoter(id, cur.Address, f.Index(), groupChangeWait)
		}
	default:
		return 0, fmt.Errorf("unknown group change %v", op)
	}
	if fut != nil {
		if err := raftgroup.WaitFuture(ctx, fut, nil); err != nil {
			if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
				_, lid := r.LeaderWithID()
				return 0, &raftgroup.NotLeaderError{Group: group, LeaderID: string(lid)}
			}
			return 0, fmt.Errorf("%s %s in %s: %w", op, nodeID, group, err)
		}
	}
	return r.LastIndex(), nil
}

// groupRaft is this node's raft instance of group.
func (n *Node) groupRaft(group string) (*raft.Raft, error) {
	if group == metaGroup {
		return n.meta.Raft(), nil
	}
	id, ok := parseShardGroup(group)
	if !ok {
		return nil, fmt.Errorf("unknown raft group %q", group)
	}
	if s := n.shards.get(id); s != nil {
		return s.Raft(), nil
	}
	return nil, &raftgroup.NotLeaderError{Group: group}
}

// groupChange asks group's leader, wherever it is, to apply op to this
// node, and returns the leader's last log index after it.
func (n *Node) groupChange(ctx context.Context, group string, op peerpb.GroupChangeRequest_Op) error {
	_, err := n.groupChangeIndex(ctx, group, op)
	return err
}

func (n *Node) groupChangeIndex(ctx context.Context, group string, op peerpb.GroupChangeRequest_Op) (uint64, error) {
	req := &peerpb.GroupChangeRequest{Group: group, Op: op, NodeId: n.cfg.NodeID, RaftAddr: n.mux.Addr()}
	return n.groupChangeAt(ctx, req)
}

// groupChangeAt passes req to the other alive members in turn, following
// a refusal's leader hint, until the group's leader takes it.
func (n *Node) groupChangeAt(ctx context.Context, req *peerpb.GroupChangeRequest) (uint64, error) {
	group, op := req.GetGroup(), req.GetOp()
	var lastErr error
	tried := map[string]bool{n.cfg.NodeID: true}
	try := func(m Member) (uint64, bool) {
		tried[m.NodeID] = true
		cctx, cancel := context.WithTimeout(ctx, groupChangeWait+2*time.Second)
		defer cancel()
		resp, hint, err := n.cfg.Peers.GroupChange(cctx, m, req)
		if err == nil {
			return resp.GetLeaderLastIndex(), true
		}
		lastErr = fmt.Errorf("%s: %w", m.NodeID, err)
		if hint != "" && !tried[hint] {
			if hm, ok := n.gossip.get(hint); ok {
				tried[hint] = true
				cctx, cancel := context.WithTimeout(ctx, groupChangeWait+2*time.Second)
				defer cancel()
				if resp, _, err := n.cfg.Peers.GroupChange(cctx, hm, req); err == nil {
					return resp.GetLeaderLastIndex(), true
				} else {
					lastErr = fmt.Errorf("%s: %w", hint, err)
				}
			}
		}
		return 0, false
	}
	for _, m := range n.gossip.alive() {
		if tried[m.NodeID] {
			continue
		}
		if idx, ok := try(m.Member); ok {
			return idx, nil
		}
	}
	if lastErr == nil {
		lastErr = errors.New("no other member is alive")
	}
	return 0, fmt.Errorf("%v %s in %s: no leader took it: %w", op, req.GetNodeId(), group, lastErr)
}

// Repair repairs this node's damaged shard replicas: each is removed from
// its group, moved aside and re-created empty; rejoinLoop then adds it
// back. It returns what it did per group. A damaged meta replica is
// repaired at start (--repair), since the node cannot run without one.
func (n *Node) Repair(ctx context.Context) []*peerpb.GroupRepair {
	// One repair at a time (--repair's retries, an operator's command):
	// a second one working from the same damage would move the freshly
	// re-created directory aside.
	n.repairMu.Lock()
	defer n.repairMu.Unlock()
	var out []*peerpb.GroupRepair
	for id, d := range n.shards.damagedReplicas() {
		g := shardGroup(id)
		rep := &peerpb.GroupRepair{Group: g, Reason: d.Reason}
		out = append(out, rep)
		if err := n.repairShard(ctx, id, d); err != nil {
			rep.Outcome = err.Error()
			n.logger.Error("repair failed; run it again once the group has a leader", "group", g, "err", err)
			continue
		}
		rep.Outcome = "removed from its group and re-created empty; rejoining as a nonvoter, promoted once caught up"
	}
	return out
}

func (n *Node) repairShard(ctx context.Context, id uint32, d *raftstore.DamageError) error {
	g := shardGroup(id)
	if err := n.groupChange(ctx, g, peerpb.GroupChangeRequest_OP_REMOVE); err != nil {
		return err
	}
	to, err := raftstore.Discard(d.Dir)
	if err != nil {
		return err
	}
	if err := n.ident.Rejoin(g, "", true); err != nil {
		return err
	}
	n.logger.Warn("damaged replica removed from its group and moved aside; re-creating it empty", "group", g, "moved_to", to)
	n.shards.clearDamage(id)
	n.shards.kick()
	return nil
}

// rejoinLoop brings every replica marked for rejoining back into its
// group: added as a nonvoter, caught up, then promoted if it was a voter.
func (n *Node) rejoinLoop(ctx context.Context) {
	tick := time.NewTicker(rejoinEvery)
	defer tick.Stop()
	// targets holds, per group being rejoined, the leader's last log index
	// of the previous round: the replica counts as caught up once it has
	// applied that far. The index of the same round is never reached
	// under steady writes: by the time the replica's applied index is
	// read, the leader has appended more.
	targets := map[string]uint64{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.verifiedCh():
		}
		for group, voter := range n.ident.Rejoining() {
			if err := n.rejoin(ctx, group, voter, targets); err != nil && ctx.Err() == nil {
				n.logger.Info("rejoining group: not yet", "group", group, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (n *Node) rejoin(ctx context.Context, group string, voter bool, targets map[string]uint64) error {
	r, applied := n.localRaft(group)
	if r == nil {
		return errors.New("local replica not open yet")
	}
	last, err := n.groupChangeIndex(ctx, group, peerpb.GroupChangeRequest_OP_ADD_NONVOTER)
	if err != nil {
		return err
	}
	target, ok := targets[group]
	if !ok {
		target = last
	}
	targets[group] = last
	if got := applied(); got < target {
		return fmt.Errorf("catching up: applied %d of %d", got, target)
	}
	if voter {
		if err := n.groupChange(ctx, group, peerpb.GroupChangeRequest_OP_PROMOTE); err != nil {
			return err
		}
	}
	delete(targets, group)
	n.logger.Info("replica rejoined its group", "group", group, "voter", voter)
	return n.ident.Rejoined(group)
}

// localRaft is this node's open replica of group and how far it applied.
func (n *Node) localRaft(group string) (*raft.Raft, func() uint64) {
	if group == metaGroup {
		return n.meta.Raft(), n.meta.Raft().AppliedIndex
	}
	id, ok := parseShardGroup(group)
	if !ok {
		return nil, nil
	}
	s := n.shards.get(id)
	if s == nil {
		return nil, nil
	}
	return s.Raft(), s.Raft().AppliedIndex
}
