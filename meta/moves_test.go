package meta

import (
	"slices"
	"strings"
	"testing"

	"github.com/raftq/raftq/meta/metapb"
)

func moveCmd(shard uint32, from, to string, phase metapb.MovePhase) *metapb.Command {
	return &metapb.Command{Cmd: &metapb.Command_MoveStep{MoveStep: &metapb.MoveStep{
		Shard: shard, From: from, To: to, ToRaftAddr: to + ":7000", Phase: phase}}}
}

func retireCmd(node string) *metapb.Command {
	return &metapb.Command{Cmd: &metapb.Command_RetireNode{RetireNode: &metapb.RetireNode{NodeId: node}}}
}

const (
	phAdd     = metapb.MovePhase_MOVE_PHASE_ADD
	phPromote = metapb.MovePhase_MOVE_PHASE_PROMOTE
	phRemove  = metapb.MovePhase_MOVE_PHASE_REMOVE
	phDone    = metapb.MovePhase_MOVE_PHASE_DONE
)

// A move walks the map through its phases: to is a learner, then a voter,
// then from leaves; every step is recorded, a retried step changes
// nothing, and the record survives a snapshot round trip.
func TestFSM_MoveStepsChangeTheMapOneStepAtATime(t *testing.T) {
	f := NewFSM(nil)
	idx := uint64(1)
	apply := func(cmd *metapb.Command) *metapb.Result {
		idx++
		return applyAt(t, f, idx, 0, cmd)
	}
	if r := apply(placeCmd(2, []string{"n1", "n2", "n3"})); r.GetCode() != metapb.Code_CODE_OK {
		t.Fatal(r)
	}
	check := func(step string, nodes, learners []string, phase metapb.MovePhase) {
		t.Helper()
		m := shardMapFromProto(f.ShardMap())
		got := slices.Clone(m.Replicas[0])
		slices.Sort(got)
		if !slices.Equal(got, nodes) || !slices.Equal(m.Learners[0], learners) {
			t.Fatalf("%s: nodes %v learners %v, want %v %v", step, got, m.Learners[0], nodes, learners)
		}
		mv, ok := m.MoveOf(0)
		if phase == metapb.MovePhase_MOVE_PHASE_UNSPECIFIED {
			if ok {
				t.Fatalf("%s: move still recorded: %+v", step, mv)
			}
			return
		}
		if !ok || mv.Phase != phase || mv.From != "n3" || mv.To != "n4" {
			t.Fatalf("%s: move %+v (recorded %v), want n3->n4 at %v", step, mv, ok, phase)
		}
	}
	all3 := []string{"n1", "n2", "n3"}
	v0 := f.ShardMap().GetVersion()
	for _, step := range []struct {
		phase    metapb.MovePhase
		nodes    []string
		learners []string
	}{
		{phAdd, all3, []string{"n4"}},
		{phPromote, []string{"n1", "n2", "n3", "n4"}, nil},
		{phRemove, []string{"n1", "n2", "n3", "n4"}, nil},
	} {
		for try := 0; try < 2; try++ { // the second is a retry
			if r := apply(moveCmd(0, "n3", "n4", step.phase)); r.GetCode() != metapb.Code_CODE_OK {
				t.Fatalf("%v (try %d): %v", step.phase, try, r)
			}
			check(step.phase.String(), step.nodes, step.learners, step.phase)
		}
	}
	if r := apply(moveCmd(0, "n3", "n4", phDone)); r.GetCode() != metapb.Code_CODE_OK {
		t.Fatal(r)
	}
	check("done", []string{"n1", "n2", "n4"}, nil, metapb.MovePhase_MOVE_PHASE_UNSPECIFIED)
	if r := apply(moveCmd(0, "n3", "n4", phDone)); r.GetCode() != metapb.Code_CODE_OK {
		t.Fatalf("a retried done: %v", r)
	}
	m := shardMapFromProto(f.ShardMap())
	if m.Version != v0+4 || m.Changes[0] != 3 || m.Changes[1] != 0 || m.RaftAddrs["n4"] != "n4:7000" {
		t.Fatalf("version %d (from %d), changes %v, addrs %v", m.Version, v0, m.Changes, m.RaftAddrs)
	}
	if got := m.ShardsOf("n3"); !slices.Equal(got, []uint32{1}) {
		t.Fatalf("n3 still holds %v", got)
	}

	// A move in flight survives a snapshot.
	if r := apply(moveCmd(1, "n1", "n4", phAdd)); r.GetCode() != metapb.Code_CODE_OK {
		t.Fatal(r)
	}
	g := restoredCopy(t, f)
	if mv, ok := shardMapFromProto(g.ShardMap()).MoveOf(1); !ok || mv.Phase != phAdd || mv.From != "n1" || mv.To != "n4" {
		t.Fatalf("restored move %+v %v", mv, ok)
	}
}

// The rules: one move per shard at a time, no phase skipped (from is never
// removed before to is a voter), no move onto a node that holds the shard
// or off one that does not, and a node is retired only once it holds
// nothing.
func TestFSM_MoveRules(t *testing.T) {
	f := NewFSM(nil)
	idx := uint64(1)
	apply := func(cmd *metapb.Command) *metapb.Result {
		idx++
		return applyAt(t, f, idx, 0, cmd)
	}
	apply(placeCmd(1, []string{"n1", "n2", "n3"}))
	refused := func(what string, cmd *metapb.Command, says string) {
		t.Helper()
		before := f.ShardMap()
		r := apply(cmd)
		if r.GetCode() != metapb.Code_CODE_REFUSED || !strings.Contains(r.GetMessage(), says) {
			t.Fatalf("%s: got %v %q, want refused saying %q", what, r.GetCode(), r.GetMessage(), says)
		}
		if after := f.ShardMap(); after.GetVersion() != before.GetVersion() {
			t.Fatalf("%s: a refused step changed the map", what)
		}
	}
	refused("promote without a move", moveCmd(0, "n3", "n4", phPromote), "no move")
	refused("move off a node without the shard", moveCmd(0, "n5", "n4", phAdd), "no replica on n5")
	refused("move onto a node with the shard", moveCmd(0, "n3", "n2", phAdd), "already has a replica on n2")
	if r := apply(moveCmd(0, "n3", "n4", phAdd)); r.GetCode() != metapb.Code_CODE_OK {
		t.Fatal(r)
	}
	refused("a second move of the shard", moveCmd(0, "n2", "n5", phAdd), "one move per shard")
	refused("remove before promote", moveCmd(0, "n3", "n4", phRemove), "cannot skip")
	refused("done before remove", moveCmd(0, "n3", "n4", phDone), "cannot skip")
	refused("retire a node with a replica", retireCmd("n3"), "still holds a replica of shard 0")
	refused("retire the learner", retireCmd("n4"), "still holds a replica of shard 0")
	for _, p := range []metapb.MovePhase{phPromote, phRemove, phDone} {
		if r := apply(moveCmd(0, "n3", "n4", p)); r.GetCode() != metapb.Code_CODE_OK {
			t.Fatal(p, r)
		}
	}
	for try := 0; try < 2; try++ {
		if r := apply(retireCmd("n3")); r.GetCode() != metapb.Code_CODE_OK {
			t.Fatalf("retire n3 (try %d): %v", try, r)
		}
	}
	if m := shardMapFromProto(f.ShardMap()); !m.IsRetired("n3") || m.IsRetired("n4") {
		t.Fatalf("retired %v", m.Retired)
	}
	refused("a move onto a retired node", moveCmd(0, "n1", "n3", phAdd), "retired")
	if r := apply(moveCmd(0, "n1", "n1", phAdd)); r.GetCode() != metapb.Code_CODE_INVALID {
		t.Fatalf("a move onto itself: %v", r)
	}
}

// A top-up (a move without a source) adds a replica to a short shard: the
// target becomes a learner, then a voter, and its REMOVE and DONE steps
// remove nothing; it needs log format 9, and its rules are a move's.
func TestFSM_TopUpAddsAReplica(t *testing.T) {
	f := NewFSM(nil)
	idx := uint64(1)
	apply := func(cmd *metapb.Command) *metapb.Result {
		idx++
		return applyAt(t, f, idx, 0, cmd)
	}
	apply(placeCmd(1, []string{"n1", "n2"}))
	nodes := func() ([]string, []string) {
		m := shardMapFromProto(f.ShardMap())
		got := slices.Clone(m.Replicas[0])
		slices.Sort(got)
		return got, m.Learners[0]
	}
	if got, _ := nodes(); !slices.Equal(got, []string{"n1", "n2"}) {
		t.Fatalf("placed on %v", got)
	}
	if r := apply(moveCmd(0, "", "n2", phAdd)); r.GetCode() != metapb.Code_CODE_REFUSED || !strings.Contains(r.GetMessage(), "already has a replica on n2") {
		t.Fatalf("a top-up onto a holder: %v", r)
	}
	if r := apply(moveCmd(0, "", "n3", phAdd)); r.GetCode() != metapb.Code_CODE_OK {
		t.Fatal(r)
	}
	if got, learners := nodes(); !slices.Equal(got, []string{"n1", "n2"}) || !slices.Equal(learners, []string{"n3"}) {
		t.Fatalf("after add: nodes %v learners %v", got, learners)
	}
	if r := apply(moveCmd(0, "n1", "n4", phAdd)); r.GetCode() != metapb.Code_CODE_REFUSED || !strings.Contains(r.GetMessage(), "one move per shard") {
		t.Fatalf("a second move during a top-up: %v", r)
	}
	for _, p := range []metapb.MovePhase{phPromote, phRemove, phDone, phDone} {
		if r := apply(moveCmd(0, "", "n3", p)); r.GetCode() != metapb.Code_CODE_OK {
			t.Fatal(p, r)
		}
	}
	got, learners := nodes()
	if !slices.Equal(got, []string{"n1", "n2", "n3"}) || len(learners) != 0 {
		t.Fatalf("after the top-up: nodes %v learners %v", got, learners)
	}
	if _, ok := shardMapFromProto(f.ShardMap()).MoveOf(0); ok {
		t.Fatal("the top-up is still recorded")
	}
	for _, tc := range []struct {
		cmd  *metapb.Command
		want uint32
	}{
		{moveCmd(0, "", "n3", phAdd), 9},
		{moveCmd(0, "", "n3", phDone), 9},
		{moveCmd(0, "n1", "n3", phAdd), 2},
		{abortCmd(0, "", "n3", false), 9},
		{abortCmd(0, "n1", "n3", false), 3},
	} {
		if got := CommandFormat(tc.cmd); got != tc.want {
			t.Errorf("format of %v: %d, want %d", tc.cmd, got, tc.want)
		}
	}
}
