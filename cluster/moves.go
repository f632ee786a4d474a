package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/meta/metapb"
	"github.com/raftq/raftq/peer"
	"github.com/raftq/raftq/peer/peerpb"
	"github.com/raftq/raftq/raftgroup"
)

// The move executor is a duty of the meta leader. It carries out the
// replica moves recorded in the shard map (meta/moves.go) one at a time,
// cluster-wide, a step per round at most: each phase is committed in meta
// before the group is changed, every group change is idempotent
// (ChangeGroup reads the configuration first), so a new meta leader picks
// a move up at its recorded phase and repeats at most one harmless change.

const (
	// moveEvery paces the executor by default (Config.MoveEvery): the
	// rate limit of moves, so a move under load costs clients one
	// configuration change a round at most.
	moveEvery = time.Second
	// moveLag is how far a new replica's applied index may trail the
	// leader's last index and still count as caught up: a few rounds of
	// writes, which the promoted replica replicates like any voter.
	moveLag = 64
)

// moveLoop runs on every node and acts while this node leads meta: it
// advances the running move, or starts the next one a drain needs, or
// finishes a drained node.
func (n *Node) moveLoop(ctx context.Context) {
	tick := time.NewTicker(n.cfg.MoveEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !n.meta.IsLeader() || !isDone(n.verifiedCh()) {
			continue
		}
		m := n.meta.ShardMap()
		if !m.Placed() {
			continue
		}
		var err error
		switch {
		case len(m.Moves) > 0:
			err = n.advanceMove(ctx, m.Moves[0])
		case len(m.Drains) > 0:
			err = n.advanceDrain(ctx, m, m.Drains[0])
		default:
			continue
		}
		if err != nil && ctx.Err() == nil {
			n.logger.Info("replica move: not yet", "err", err)
		}
	}
}

// advanceMove takes the move one phase further if the group allows it.
func (n *Node) advanceMove(ctx context.Context, mv meta.Move) error {
	g := shardGroup(mv.Shard)
	toAddr := n.meta.ShardMap().RaftAddrs[mv.To]
	if mv.Aborting {
		return n.finishAbort(ctx, mv)
	}
	switch mv.Phase {
	case metapb.MovePhase_MOVE_PHASE_ADD:
		applied, last, err := n.addCaughtUp(ctx, mv, g, toAddr)
		if err != nil {
			return err
		}
		n.logger.Info("replica move: new replica caught up; promoting", "shard", mv.Shard, "from", mv.From, "to", mv.To, "applied", applied, "leader_last", last)
		return n.recordMove(ctx, mv, metapb.MovePhase_MOVE_PHASE_PROMOTE)
	case metapb.MovePhase_MOVE_PHASE_PROMOTE:
		// Added first in case the group lost it: promote needs it present.
		// Not checked again for catch-up: the group may have promoted it
		// already, and a voter that died since must not hold the move (and
		// every move and drain behind it) until it returns. A replica the
		// group really lost comes back empty and is promoted so; the
		// voters it joins still make a quorum without it, except on a
		// top-up from one voter to two, which then waits for its catch-up.
		if _, err := n.changeAtLeader(ctx, g, peerpb.GroupChangeRequest_OP_ADD_NONVOTER, mv.To, toAddr); err != nil {
			return err
		}
		if _, err := n.changeAtLeader(ctx, g, peerpb.GroupChangeRequest_OP_PROMOTE, mv.To, toAddr); err != nil {
			return err
		}
		return n.recordMove(ctx, mv, metapb.MovePhase_MOVE_PHASE_REMOVE)
	case metapb.MovePhase_MOVE_PHASE_REMOVE:
		// A top-up (no From) removes nothing.
		if mv.From != "" {
			if _, err := n.changeAtLeader(ctx, g, peerpb.GroupChangeRequest_OP_REMOVE, mv.From, ""); err != nil {
				return err
			}
		}
		if err := n.recordMove(ctx, mv, metapb.MovePhase_MOVE_PHASE_DONE); err != nil {
			return err
		}
		n.logger.Info("replica move: done", "shard", mv.Shard, "from", mv.From, "to", mv.To)
		return nil
	default:
		return fmt.Errorf("shard %d: unknown move phase %v", mv.Shard, mv.Phase)
	}
}

// addCaughtUp adds the move's target to group as a nonvoter (nothing
// changes if it is a member) and returns how far its replica applied and
// the leader's last index, or an error while it trails by more than
// moveLag entries. A replica that applied nothing has not caught up
// whatever the lag: on a young group moveLag alone would pass an empty one.
func (n *Node) addCaughtUp(ctx context.Context, mv meta.Move, group, toAddr string) (applied, last uint64, err error) {
	last, err = n.changeAtLeader(ctx, group, peerpb.GroupChangeRequest_OP_ADD_NONVOTER, mv.To, toAddr)
	if err != nil {
		return 0, 0, err
	}
	applied, err = n.replicaApplied(ctx, mv.To, group)
	if err != nil {
		return 0, 0, fmt.Errorf("%s on %s: %w", group, mv.To, err)
	}
	if applied == 0 || applied+moveLag < last {
		return 0, 0, fmt.Errorf("%s on %s catching up: applied %d of %d", group, mv.To, applied, last)
	}
	return applied, last, nil
}

func (n *Node) recordMove(ctx context.Context, mv meta.Move, phase metapb.MovePhase) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return n.meta.MoveStep(ctx, mv.Shard, mv.From, mv.To, "", phase)
}

// replicaApplied asks node how far its replica of group applied.
func (n *Node) replicaApplied(ctx context.Context, node, group string) (uint64, error) {
	if node == n.cfg.NodeID {
		st, err := n.ReplicaStatus(group)
		if err != nil {
			return 0, err
		}
		return st.GetAppliedIndex(), nil
	}
	m, ok := n.gossip.get(node)
	if !ok {
		return 0, errors.New("not a member")
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := n.cfg.Peers.ReplicaStatus(ctx, m, &peerpb.ReplicaStatusRequest{Group: group})
	if err != nil {
		return 0, err
	}
	return st.GetAppliedIndex(), nil
}

// ReplicaStatus reports how far this node's replica of group applied.
func (n *Node) ReplicaStatus(group string) (*peerpb.ReplicaStatusResponse, error) {
	r, applied := n.localRaft(group)
	if r == nil {
		return nil, fmt.Errorf("%s: %w", group, peer.ErrNoReplica)
	}
	return &peerpb.ReplicaStatusResponse{NodeId: n.cfg.NodeID, AppliedIndex: applied(), LastIndex: r.LastIndex()}, nil
}

// changeAtLeader applies one membership change to group at its leader,
// here or on the member that leads it, and returns the leader's last log
// index after it.
func (n *Node) changeAtLeader(ctx context.Context, group string, op peerpb.GroupChangeRequest_Op, nodeID, raftAddr string) (uint64, error) {
	cctx, cancel := context.WithTimeout(ctx, groupChangeWait+2*time.Second)
	last, err := n.ChangeGroup(cctx, group, op, nodeID, raftAddr)
	cancel()
	var nl *raftgroup.NotLeaderError
	if err == nil || !errors.As(err, &nl) {
		return last, err
	}
	req := &peerpb.GroupChangeRequest{Group: group, Op: op, NodeId: nodeID, RaftAddr: raftAddr}
	return n.groupChangeAt(ctx, req)
}
