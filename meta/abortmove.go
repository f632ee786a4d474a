package meta

import (
	"context"
	"fmt"
	"slices"

	"github.com/raftq/raftq/meta/metapb"
)

// A move is aborted only at ADD, where its target is a learner (a nonvoter
// in the group): removing it leaves every quorum as it was. From PROMOTE on
// the target votes, and the move must run forward. The abort takes two
// steps so that a new meta leader resumes it: the first marks the move
// aborting, which also fences off PROMOTE (an executor that saw the target
// catch up a moment ago is refused), the executor removes the target from
// the group, and the second step drops it from the map.

// AbortMove records the abort of the move of shard from from to to: with
// finish false it marks the move aborting, with finish true (once the
// group no longer has to) it drops the move. Repeated steps succeed; an
// abort after PROMOTE, or with no such move running, is refused with
// ErrRefused.
func (s *Store) AbortMove(ctx context.Context, shard uint32, from, to string, finish bool) error {
	cmd := &metapb.Command{Cmd: &metapb.Command_AbortMove{AbortMove: &metapb.AbortMove{
		Shard: shard, From: from, To: to, Finish: finish}}}
	if _, err := s.apply(ctx, cmd); err != nil {
		step := "abort"
		if finish {
			step = "finish the abort of"
		}
		return fmt.Errorf("%s the move of shard %d from %s to %s: %w", step, shard, from, to, err)
	}
	return nil
}

func (f *FSM) abortMove(c *metapb.AbortMove) *metapb.Result {
	if f.shardMap == nil {
		return refusal("no shard map is placed")
	}
	from, to := c.GetFrom(), c.GetTo()
	if to == "" || from == to {
		return &metapb.Result{Code: metapb.Code_CODE_INVALID, Message: "a move needs a target node other than its source"}
	}
	i := slices.IndexFunc(f.shardMap.GetShards(), func(r *metapb.ShardReplicas) bool { return r.GetShard() == c.GetShard() })
	if i < 0 {
		return &metapb.Result{Code: metapb.Code_CODE_INVALID, Message: fmt.Sprintf("no shard %d", c.GetShard())}
	}
	sr := f.shardMap.GetShards()[i]
	mi := slices.IndexFunc(f.shardMap.GetMoves(), func(m *metapb.Move) bool { return m.GetShard() == c.GetShard() })
	if mi < 0 {
		if c.GetFinish() && !slices.Contains(sr.GetLearners(), to) && !slices.Contains(sr.GetNodes(), to) {
			return &metapb.Result{} // finished already: a retried step
		}
		return refusal("shard %d: no move is running", c.GetShard())
	}
	mv := f.shardMap.GetMoves()[mi]
	switch {
	case mv.GetFrom() != from || mv.GetTo() != to:
		return refusal("shard %d: the running move is from %s to %s, not from %s to %s", c.GetShard(), mv.GetFrom(), mv.GetTo(), from, to)
	case mv.GetPhase() != metapb.MovePhase_MOVE_PHASE_ADD:
		return refusal("shard %d: the move from %s to %s is at %s: %s votes already, so the move can only finish", c.GetShard(), from, to, phaseName(mv.GetPhase()), to)
	case !c.GetFinish():
		if !mv.GetAborting() {
			mv.Aborting = true
			f.shardMap.Version++
		}
		return &metapb.Result{}
	case !mv.GetAborting():
		return refusal("shard %d: the move from %s to %s is not being aborted", c.GetShard(), from, to)
	}
	sr.Learners = slices.DeleteFunc(sr.Learners, func(n string) bool { return n == to })
	f.shardMap.Moves = slices.Delete(f.shardMap.Moves, mi, mi+1)
	f.shardMap.Drains = slices.DeleteFunc(f.shardMap.Drains, func(d *metapb.DrainNode) bool { return d.GetNodeId() == from && d.GetTo() == to })
	sr.Changes++ // the replica set changed
	f.shardMap.Version++
	return &metapb.Result{}
}
