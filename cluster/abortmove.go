package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/meta/metapb"
	"github.com/raftq/raftq/peer/peerpb"
)

// A move at ADD is aborted when its target stays away (abortDeadTargets,
// run by the meta leader's dead-node duty) or an operator cancels it
// (CancelMove). The abort is recorded first (meta AbortMove), which fences
// off PROMOTE; the move executor then removes the target from the group and
// finishes the abort in meta. Both steps are idempotent and recorded, so a
// new meta leader resumes an abort wherever the last one stopped.

// finishAbort carries out a recorded abort: the target, a nonvoter, leaves
// the group (nothing happens if it is not there), then the move is dropped
// from the map.
func (n *Node) finishAbort(ctx context.Context, mv meta.Move) error {
	g := shardGroup(mv.Shard)
	if _, err := n.changeAtLeader(ctx, g, peerpb.GroupChangeRequest_OP_REMOVE, mv.To, ""); err != nil {
		return fmt.Errorf("abort: remove %s from %s: %w", mv.To, g, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := n.meta.AbortMove(ctx, mv.Shard, mv.From, mv.To, true); err != nil {
		return err
	}
	n.logger.Warn("replica move: aborted; the new replica left the group", "shard", mv.Shard, "from", mv.From, "to", mv.To)
	return nil
}

// abortDeadTargets records the abort of each move at ADD whose target has
// been continuously not alive for the dead-node grace: such a move cannot
// finish, blocks every other move (the executor runs one at a time) and
// keeps the dead-node duty from replacing the target. Called by
// replaceDeadNodes with its clocks (d.since: when each not-alive member
// was first seen so).
func (n *Node) abortDeadTargets(ctx context.Context, m meta.ShardMap, d *deadNodes, now time.Time) {
	for _, mv := range m.Moves {
		s, away := d.since[mv.To]
		if mv.Phase != metapb.MovePhase_MOVE_PHASE_ADD || mv.Aborting || !away || now.Sub(s) < n.cfg.DeadNodeGrace {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := n.meta.AbortMove(cctx, mv.Shard, mv.From, mv.To, false)
		cancel()
		if err != nil {
			// Say it once a minute, not every round: a replica on an
			// older log format (docs/logformats.md) refuses it until upgraded.
			if last, ok := d.aborts[mv.Shard]; !ok || now.Sub(last) >= deadNodeLogEvery {
				d.aborts[mv.Shard] = now
				n.logger.Warn("replica move: cannot record the abort of a move onto a dead node", "shard", mv.Shard, "to", mv.To, "err", err)
			}
			continue
		}
		delete(d.aborts, mv.Shard)
		n.logger.Warn("replica move: aborting: its new replica has not been alive for the dead-node grace",
			"shard", mv.Shard, "from", mv.From, "to", mv.To, "away_for", now.Sub(s).Round(time.Second))
	}
}
