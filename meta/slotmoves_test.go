package meta

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/raftq/raftq/meta/metapb"
)

const (
	phSeal  = metapb.SlotMovePhase_SLOT_MOVE_PHASE_SEAL
	phRoute = metapb.SlotMovePhase_SLOT_MOVE_PHASE_ROUTE
	phSDone = metapb.SlotMovePhase_SLOT_MOVE_PHASE_DONE
)

func slotStepCmd(mv SlotMove, phase metapb.SlotMovePhase) *metapb.Command {
	return &metapb.Command{Cmd: &metapb.Command_SlotMoveStep{SlotMoveStep: &metapb.SlotMoveStep{
		Id: mv.ID, Slots: mv.Slots, From: mv.From, To: mv.To, Phase: phase, DedupUntilMs: mv.DedupUntilMs}}}
}

func abortSlotCmd(id uint64) *metapb.Command {
	return &metapb.Command{Cmd: &metapb.Command_AbortSlotMove{AbortSlotMove: &metapb.AbortSlotMove{Id: id}}}
}

func forgetSlotCmd(id uint64) *metapb.Command {
	return &metapb.Command{Cmd: &metapb.Command_ForgetSlotMove{ForgetSlotMove: &metapb.ForgetSlotMove{Id: id}}}
}

// newGrownFSM places 2 shards and grows to 3; apply runs at now ms.
func newGrownFSM(t *testing.T) (*FSM, func(now int64, cmd *metapb.Command) *metapb.Result) {
	t.Helper()
	f := NewFSM(nil)
	idx := uint64(0)
	apply := func(now int64, cmd *metapb.Command) *metapb.Result {
		idx++
		return applyAt(t, f, idx, now, cmd)
	}
	mustOK(t, "place", apply(0, placeCmd(2, []string{"n1", "n2", "n3"})))
	mustOK(t, "grow", apply(0, growCmd(3, map[uint32][]string{2: {"n1", "n2", "n3"}})))
	return f, apply
}

// A slot move walks SEAL, ROUTE, DONE; each step repeated changes nothing;
// ROUTE alone changes the owners; the record survives a snapshot; a done
// move is forgotten only once its dedup window has passed, and a step of
// it retried after that still succeeds, while a retried SEAL is refused.
func TestFSM_SlotMoveSteps(t *testing.T) {
	f, apply := newGrownFSM(t)
	mv := SlotMove{ID: 1, Slots: []uint32{0, 2, 4}, From: 0, To: 2, DedupUntilMs: 9000}
	owners := func() []uint32 { return shardMapFromProto(f.ShardMap()).SlotOwners }
	before := owners()
	for _, ph := range []metapb.SlotMovePhase{phSeal, phRoute, phSDone} {
		mustOK(t, SlotPhaseName(ph), apply(100, slotStepCmd(mv, ph)))
		v := f.ShardMap().GetVersion()
		m := shardMapFromProto(f.ShardMap())
		rec, ok := m.SlotMoveOf(1)
		if !ok || rec.Phase != ph || !slices.Equal(rec.Slots, mv.Slots) || rec.From != 0 || rec.To != 2 || m.NextSlotMoveID != 2 {
			t.Fatalf("%s: record %+v (%v), next id %d", SlotPhaseName(ph), rec, ok, m.NextSlotMoveID)
		}
		for _, s := range mv.Slots {
			want := uint32(0)
			if ph != phSeal {
				want = 2
			}
			if m.SlotOwners[s] != want {
				t.Fatalf("%s: slot %d owned by %d, want %d", SlotPhaseName(ph), s, m.SlotOwners[s], want)
			}
		}
		if ph == phSeal && !slices.Equal(m.SlotOwners, before) {
			t.Fatal("seal changed the owners")
		}
		if ph != phSeal && rec.DedupUntilMs != 9000 {
			t.Fatalf("%s: dedup until %d", SlotPhaseName(ph), rec.DedupUntilMs)
		}
		// Every step up to this one, retried, changes nothing.
		for _, again := range []metapb.SlotMovePhase{phSeal, phRoute, phSDone} {
			if again > ph {
				break
			}
			mustOK(t, "retry "+SlotPhaseName(again), apply(100, slotStepCmd(mv, again)))
		}
		if f.ShardMap().GetVersion() != v {
			t.Fatalf("%s: retried steps bumped the version", SlotPhaseName(ph))
		}
	}

	// The record survives a snapshot round trip.
	g := restoredCopy(t, f)
	if !proto.Equal(f.ShardMap(), g.ShardMap()) || len(g.ShardMap().GetSlotMoves()) != 1 || g.ShardMap().GetNextSlotMoveId() != 2 {
		t.Fatalf("restored map differs:\n%v\n%v", f.ShardMap(), g.ShardMap())
	}

	mustCode(t, "forget within the window", apply(8999, forgetSlotCmd(1)), metapb.Code_CODE_REFUSED, "dedup window runs 1 ms more")
	mustOK(t, "forget", apply(9000, forgetSlotCmd(1)))
	if _, ok := shardMapFromProto(f.ShardMap()).SlotMoveOf(1); ok {
		t.Fatal("forgotten move still recorded")
	}
	mustOK(t, "forget retried", apply(9000, forgetSlotCmd(1)))
	mustOK(t, "done retried after forget", apply(9000, slotStepCmd(mv, phSDone)))
	mustCode(t, "seal retried after forget", apply(9000, slotStepCmd(mv, phSeal)), metapb.Code_CODE_REFUSED, "no longer recorded")
	if got := owners(); got[0] != 2 || got[2] != 2 || got[4] != 2 || got[1] != 1 {
		t.Fatalf("owners after forget: %v", got[:5])
	}
}

// The steps the record does not allow are refused and change nothing.
func TestFSM_SlotMoveRules(t *testing.T) {
	f, apply := newGrownFSM(t)
	mustOK(t, "seal 1", apply(0, slotStepCmd(SlotMove{ID: 1, Slots: []uint32{0, 2}, From: 0, To: 2}, phSeal)))
	v := f.ShardMap().GetVersion()
	for _, tc := range []struct {
		name string
		mv   SlotMove
		ph   metapb.SlotMovePhase
		code metapb.Code
		msg  string
	}{
		{"id 0", SlotMove{Slots: []uint32{4}, From: 0, To: 2}, phSeal, metapb.Code_CODE_INVALID, "needs an id"},
		{"from = to", SlotMove{ID: 2, Slots: []uint32{4}, From: 0, To: 0}, phSeal, metapb.Code_CODE_INVALID, "two different shards"},
		{"to out of range", SlotMove{ID: 2, Slots: []uint32{4}, From: 0, To: 3}, phSeal, metapb.Code_CODE_INVALID, "two different shards"},
		{"no slots", SlotMove{ID: 2, From: 0, To: 2}, phSeal, metapb.Code_CODE_INVALID, "moves no slots"},
		{"slots unsorted", SlotMove{ID: 2, Slots: []uint32{6, 4}, From: 0, To: 2}, phSeal, metapb.Code_CODE_INVALID, "ascending"},
		{"slot beyond the table", SlotMove{ID: 2, Slots: []uint32{512}, From: 0, To: 2}, phSeal, metapb.Code_CODE_INVALID, "below 512"},
		{"no phase", SlotMove{ID: 2, Slots: []uint32{4}, From: 0, To: 2}, 0, metapb.Code_CODE_INVALID, "unknown slot move phase"},
		{"slot of another shard", SlotMove{ID: 2, Slots: []uint32{4, 5}, From: 0, To: 2}, phSeal, metapb.Code_CODE_REFUSED, "does not own"},
		{"slot in a running move", SlotMove{ID: 2, Slots: []uint32{2, 4}, From: 0, To: 1}, phSeal, metapb.Code_CODE_REFUSED, "slot 2 is in running slot move 1"},
		{"start at route", SlotMove{ID: 2, Slots: []uint32{4}, From: 0, To: 2}, phRoute, metapb.Code_CODE_REFUSED, "starts at seal"},
		{"another move's id", SlotMove{ID: 1, Slots: []uint32{4}, From: 0, To: 2}, phSeal, metapb.Code_CODE_REFUSED, "is another move"},
		{"skip to done", SlotMove{ID: 1, Slots: []uint32{0, 2}, From: 0, To: 2}, phSDone, metapb.Code_CODE_REFUSED, "cannot skip"},
	} {
		mustCode(t, tc.name, apply(0, slotStepCmd(tc.mv, tc.ph)), tc.code, tc.msg)
	}
	mustCode(t, "forget a running move", apply(0, forgetSlotCmd(1)), metapb.Code_CODE_REFUSED, "only a done move")
	mustCode(t, "abort an unknown move", apply(0, abortSlotCmd(7)), metapb.Code_CODE_REFUSED, "no slot move 7")
	if got := f.ShardMap().GetVersion(); got != v {
		t.Fatalf("refused steps bumped the version %d -> %d", v, got)
	}

	// Abort at SEAL drops the record and leaves the owners; the slots may
	// move again, under a new id only.
	owners := slices.Clone(f.ShardMap().GetSlotOwners())
	mustOK(t, "abort", apply(0, abortSlotCmd(1)))
	mustOK(t, "abort retried", apply(0, abortSlotCmd(1)))
	if m := f.ShardMap(); len(m.GetSlotMoves()) != 0 || !slices.Equal(m.GetSlotOwners(), owners) {
		t.Fatalf("after the abort: moves %v, owners changed %v", m.GetSlotMoves(), !slices.Equal(m.GetSlotOwners(), owners))
	}
	mustCode(t, "seal an aborted id", apply(0, slotStepCmd(SlotMove{ID: 1, Slots: []uint32{0, 2}, From: 0, To: 2}, phSeal)), metapb.Code_CODE_REFUSED, "no longer recorded")
	mv := SlotMove{ID: 5, Slots: []uint32{0, 2}, From: 0, To: 1}
	mustOK(t, "seal under a new id", apply(0, slotStepCmd(mv, phSeal)))
	if n := shardMapFromProto(f.ShardMap()).NextSlotMoveID; n != 6 {
		t.Fatalf("next id %d, want 6", n)
	}
	mustOK(t, "route", apply(0, slotStepCmd(mv, phRoute)))
	mustCode(t, "abort at route", apply(0, abortSlotCmd(5)), metapb.Code_CODE_REFUSED, "can only finish")
	// A slot of a DONE move may move again.
	mustOK(t, "done", apply(0, slotStepCmd(mv, phSDone)))
	mustOK(t, "move a done move's slot", apply(0, slotStepCmd(SlotMove{ID: 6, Slots: []uint32{2}, From: 1, To: 2}, phSeal)))
}

// A snapshot of a map placed before slot moves existed restores with no
// slot moves, ids from 1, and the bootstrap layout.
func TestFSM_RestoresSnapshotWithoutSlotMoves(t *testing.T) {
	old := &metapb.Snapshot{Version: SnapshotVersion, AppliedIndex: 3, ShardMap: &metapb.ShardMap{
		Version: 2, Count: 2, ClusterId: "c",
		Shards: []*metapb.ShardReplicas{{Shard: 0, Nodes: []string{"n1"}}, {Shard: 1, Nodes: []string{"n1"}}},
		Nodes:  []*metapb.NodeAddr{{NodeId: "n1", RaftAddr: "n1:7000"}}}}
	b, err := encodeSnapshot(old)
	if err != nil {
		t.Fatal(err)
	}
	f := NewFSM(nil)
	if err := f.Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
		t.Fatal(err)
	}
	m := shardMapFromProto(f.ShardMap())
	if len(m.SlotMoves) != 0 || m.NextSlotMoveID != 1 || m.Table().Slots != 512 || m.Table().Owners != nil || m.Table().Owner(3) != 1 {
		t.Fatalf("restored map: moves %v next %d table %d slots, owners %v", m.SlotMoves, m.NextSlotMoveID, m.Table().Slots, m.Table().Owners != nil)
	}
	// A first slot move on it materializes the bootstrap layout.
	mustOK(t, "seal", applyAt(t, f, 4, 0, slotStepCmd(SlotMove{ID: 1, Slots: []uint32{1}, From: 1, To: 0}, phSeal)))
	if got := f.ShardMap().GetSlotOwners(); len(got) != 512 || got[1] != 1 || got[2] != 0 {
		t.Fatalf("owners after the first seal: %d, %v", len(got), got[:3])
	}
}

func TestShardMap_CloneCopiesSlotMoves(t *testing.T) {
	m := ShardMap{SlotMoves: []SlotMove{{ID: 1, Slots: []uint32{1, 2}}}, NextSlotMoveID: 2}
	c := m.Clone()
	c.SlotMoves[0].Slots[0] = 9
	c.SlotMoves[0].ID = 7
	if m.SlotMoves[0].Slots[0] != 1 || m.SlotMoves[0].ID != 1 || c.NextSlotMoveID != 2 {
		t.Fatalf("clone shares the slot moves: %+v", m.SlotMoves)
	}
}

// A routed slot's dedup look-ups go to the shards it came from while
// their windows are open, latest first when it moved twice, and nowhere
// before ROUTE or after the window.
func TestShardMap_DedupPeers(t *testing.T) {
	f, apply := newGrownFSM(t)
	a := SlotMove{ID: 1, Slots: []uint32{0, 2}, From: 0, To: 2, DedupUntilMs: 1000}
	peers := func(slot uint32, now int64) string {
		var shards []uint32
		for _, p := range shardMapFromProto(f.ShardMap()).DedupPeers(slot, now) {
			shards = append(shards, p.Shard)
		}
		return fmt.Sprint(shards)
	}
	mustOK(t, "seal", apply(0, slotStepCmd(a, phSeal)))
	if got := peers(0, 0); got != "[]" {
		t.Fatalf("at seal: peers %s", got)
	}
	mustOK(t, "route", apply(0, slotStepCmd(a, phRoute)))
	if got := []string{peers(0, 999), peers(2, 0), peers(1, 0), peers(0, 1000), peers(9999, 0)}; !slices.Equal(got, []string{"[0]", "[0]", "[]", "[]", "[]"}) {
		t.Fatalf("at route: peers %v", got)
	}
	mustOK(t, "done", apply(0, slotStepCmd(a, phSDone)))
	b := SlotMove{ID: 2, Slots: []uint32{2}, From: 2, To: 1, DedupUntilMs: 2000}
	mustOK(t, "seal b", apply(0, slotStepCmd(b, phSeal)))
	if got := peers(2, 500); got != "[0]" {
		t.Fatalf("second move sealed: peers %s, want [0] (the table still routes to 2)", got)
	}
	mustOK(t, "route b", apply(0, slotStepCmd(b, phRoute)))
	if got := []string{peers(2, 500), peers(2, 1500), peers(0, 500)}; !slices.Equal(got, []string{"[2 0]", "[2]", "[0]"}) {
		t.Fatalf("second move routed: peers %v", got)
	}
	// Back to where it started: its first owner is not asked about itself.
	c := SlotMove{ID: 3, Slots: []uint32{2}, From: 1, To: 0, DedupUntilMs: 3000}
	mustOK(t, "done b", apply(0, slotStepCmd(b, phSDone)))
	mustOK(t, "seal c", apply(0, slotStepCmd(c, phSeal)))
	mustOK(t, "route c", apply(0, slotStepCmd(c, phRoute)))
	if got := peers(2, 500); got != "[1 2]" {
		t.Fatalf("moved back: peers %s, want [1 2]", got)
	}
}
