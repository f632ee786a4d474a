package meta

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/meta/metapb"
)

func abortCmd(shard uint32, from, to string, finish bool) *metapb.Command {
	return &metapb.Command{Cmd: &metapb.Command_AbortMove{AbortMove: &metapb.AbortMove{
		Shard: shard, From: from, To: to, Finish: finish}}}
}

func drainCmd(node, to string) *metapb.Command {
	return &metapb.Command{Cmd: &metapb.Command_DrainNode{DrainNode: &metapb.DrainNode{NodeId: node, To: to}}}
}

// newMoveFSM places 2 shards on n1..n3 and starts the move of shard 0's
// replica on n3 to n4, for a replace of n3 by n4.
func newMoveFSM(t *testing.T) (*FSM, func(*metapb.Command) *metapb.Result) {
	t.Helper()
	f := NewFSM(nil)
	idx := uint64(1)
	apply := func(cmd *metapb.Command) *metapb.Result {
		idx++
		return applyAt(t, f, idx, 0, cmd)
	}
	for _, c := range []*metapb.Command{placeCmd(2, []string{"n1", "n2", "n3"}), drainCmd("n3", "n4"), moveCmd(0, "n3", "n4", phAdd)} {
		if r := apply(c); r.GetCode() != metapb.Code_CODE_OK {
			t.Fatal(r)
		}
	}
	return f, apply
}

// An abort at ADD marks the move aborting (PROMOTE is refused from then
// on), survives a snapshot, and its finish drops the learner, the move and
// the replace onto the target; every step repeated succeeds and changes
// nothing more.
func TestFSM_AbortMoveAtAdd(t *testing.T) {
	f, apply := newMoveFSM(t)
	v0 := f.ShardMap().GetVersion()
	c0 := shardMapFromProto(f.ShardMap()).Changes[0]
	if r := apply(abortCmd(0, "n3", "n4", true)); r.GetCode() != metapb.Code_CODE_REFUSED || !strings.Contains(r.GetMessage(), "not being aborted") {
		t.Fatalf("finish before the abort is recorded: %v", r)
	}
	for try := 0; try < 2; try++ {
		if r := apply(abortCmd(0, "n3", "n4", false)); r.GetCode() != metapb.Code_CODE_OK {
			t.Fatalf("abort (try %d): %v", try, r)
		}
	}
	m := shardMapFromProto(f.ShardMap())
	if mv, ok := m.MoveOf(0); !ok || !mv.Aborting || mv.Phase != phAdd || !slices.Equal(m.Learners[0], []string{"n4"}) || m.Version != v0+1 {
		t.Fatalf("after the abort: move %+v %v, learners %v, version %d (from %d)", mv, ok, m.Learners[0], m.Version, v0)
	}
	if r := apply(moveCmd(0, "n3", "n4", phPromote)); r.GetCode() != metapb.Code_CODE_REFUSED || !strings.Contains(r.GetMessage(), "being aborted") {
		t.Fatalf("promote of an aborting move: %v", r)
	}

	// The aborting mark survives a snapshot, so a new leader resumes.
	g := restoredCopy(t, f)
	if mv, ok := shardMapFromProto(g.ShardMap()).MoveOf(0); !ok || !mv.Aborting || mv.To != "n4" {
		t.Fatalf("restored move %+v %v", mv, ok)
	}

	for try := 0; try < 2; try++ {
		if r := apply(abortCmd(0, "n3", "n4", true)); r.GetCode() != metapb.Code_CODE_OK {
			t.Fatalf("finish (try %d): %v", try, r)
		}
	}
	m = shardMapFromProto(f.ShardMap())
	if _, ok := m.MoveOf(0); ok || len(m.Learners[0]) != 0 || len(m.Drains) != 0 || m.Hosts(0, "n4") || !m.Hosts(0, "n3") {
		t.Fatalf("after the finish: moves %v learners %v drains %v replicas %v", m.Moves, m.Learners, m.Drains, m.Replicas[0])
	}
	if m.Version != v0+2 || m.Changes[0] != c0+1 {
		t.Fatalf("version %d (from %d), changes %d (from %d)", m.Version, v0, m.Changes[0], c0)
	}
	if r := apply(abortCmd(0, "n3", "n4", false)); r.GetCode() != metapb.Code_CODE_REFUSED || !strings.Contains(r.GetMessage(), "no move is running") {
		t.Fatalf("abort with no move: %v", r)
	}
	// The shard is free: a move onto another node starts.
	if r := apply(moveCmd(0, "n3", "n5", phAdd)); r.GetCode() != metapb.Code_CODE_OK {
		t.Fatalf("a new move after the abort: %v", r)
	}
}

// Once PROMOTE is recorded the target votes: the abort is refused and the
// move runs forward. A drain without a target survives an abort (it picks
// another node), and an abort naming the wrong nodes or shard is refused.
func TestFSM_AbortMoveRules(t *testing.T) {
	f, apply := newMoveFSM(t)
	for _, tc := range []struct {
		cmd  *metapb.Command
		code metapb.Code
		msg  string
	}{
		{abortCmd(0, "n3", "n5", false), metapb.Code_CODE_REFUSED, "running move is from n3 to n4"},
		{abortCmd(1, "n3", "n4", false), metapb.Code_CODE_REFUSED, "no move is running"},
		{abortCmd(7, "n3", "n4", false), metapb.Code_CODE_INVALID, "no shard 7"},
		{abortCmd(0, "n3", "n3", false), metapb.Code_CODE_INVALID, "target node other than its source"},
		{abortCmd(0, "n3", "", false), metapb.Code_CODE_INVALID, "target node other than its source"},
		{abortCmd(0, "", "n4", false), metapb.Code_CODE_REFUSED, "running move is from n3 to n4, not from  to n4"},
	} {
		if r := apply(tc.cmd); r.GetCode() != tc.code || !strings.Contains(r.GetMessage(), tc.msg) {
			t.Errorf("%v: got %v, want %v %q", tc.cmd, r, tc.code, tc.msg)
		}
	}
	if r := apply(moveCmd(0, "n3", "n4", phPromote)); r.GetCode() != metapb.Code_CODE_OK {
		t.Fatal(r)
	}
	for _, finish := range []bool{false, true} {
		if r := apply(abortCmd(0, "n3", "n4", finish)); r.GetCode() != metapb.Code_CODE_REFUSED || !strings.Contains(r.GetMessage(), "at promote: n4 votes already") {
			t.Fatalf("abort (finish %v) after promote: %v", finish, r)
		}
	}
	if mv, ok := shardMapFromProto(f.ShardMap()).MoveOf(0); !ok || mv.Aborting || mv.Phase != phPromote {
		t.Fatalf("the refused abort changed the move: %+v %v", mv, ok)
	}

	// A remove-node drain (no target) stays: it picks another node.
	f2 := NewFSM(nil)
	idx := uint64(1)
	for _, c := range []*metapb.Command{placeCmd(1, []string{"n1", "n2", "n3"}), drainCmd("n3", ""), moveCmd(0, "n3", "n4", phAdd),
		abortCmd(0, "n3", "n4", false), abortCmd(0, "n3", "n4", true)} {
		idx++
		if r := applyAt(t, f2, idx, 0, c); r.GetCode() != metapb.Code_CODE_OK {
			t.Fatalf("%v: %v", c, r)
		}
	}
	if m := shardMapFromProto(f2.ShardMap()); len(m.Drains) != 1 || m.Drains[0] != (Drain{Node: "n3"}) || len(m.Moves) != 0 {
		t.Fatalf("drains %v moves %v", m.Drains, m.Moves)
	}
}

// An abort is a format-3 kind: while a meta replica is recorded at format
// 2 the leader refuses it before proposing (a format-2 replica would stop
// on it), naming the replica.
func TestStore_AbortMoveWaitsForFormat3(t *testing.T) {
	stores := openGatedGroup(t, 3)
	leader := leaderOf(t, stores, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for id, n := range map[string]uint32{"m1": 3, "m2": 3, "m3": 2} {
		if err := leader.RecordNodeFormat(ctx, id, n); err != nil {
			t.Fatal(err)
		}
	}
	err := leader.AbortMove(ctx, 0, "m3", "m4", false)
	var lag *fsm.FormatLagError
	if !errors.As(err, &lag) || lag.Need != 3 || !strings.Contains(err.Error(), "abort_move") || !strings.Contains(err.Error(), "m3 (format 2)") {
		t.Fatalf("abort with m3 at format 2: %v, want a FormatLagError for abort_move", err)
	}
}
