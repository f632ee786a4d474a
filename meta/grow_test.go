package meta

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/meta/metapb"
	"github.com/raftq/raftq/wire"
)

func growCmd(count uint32, replicas map[uint32][]string) *metapb.Command {
	addrs := map[string]string{}
	for _, r := range replicas {
		for _, n := range r {
			addrs[n] = n + ":7000"
		}
	}
	return &metapb.Command{Cmd: &metapb.Command_GrowShards{GrowShards: growCommand(count, replicas, addrs)}}
}

// newFSMApply is an empty FSM and an apply that numbers the logs.
func newFSMApply(t *testing.T) (*FSM, func(*metapb.Command) *metapb.Result) {
	t.Helper()
	f := NewFSM(nil)
	idx := uint64(0)
	return f, func(cmd *metapb.Command) *metapb.Result {
		idx++
		return applyAt(t, f, idx, 1000, cmd)
	}
}

func mustOK(t *testing.T, what string, r *metapb.Result) {
	t.Helper()
	if r.GetCode() != metapb.Code_CODE_OK {
		t.Fatalf("%s: %v", what, r)
	}
}

func mustCode(t *testing.T, what string, r *metapb.Result, code metapb.Code, msg string) {
	t.Helper()
	if r.GetCode() != code || !strings.Contains(r.GetMessage(), msg) {
		t.Fatalf("%s: %v, want %v containing %q", what, r, code, msg)
	}
}

type key struct{ queue, group, dedup string }

// randomKeys is n keyed messages, grouped or keyed by dedup only.
func randomKeys(n int, seed uint64) []key {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([]key, n)
	for i := range out {
		k := key{queue: fmt.Sprintf("q%d", r.IntN(5))}
		if r.IntN(2) == 0 {
			k.group = fmt.Sprintf("g-%d", r.Uint64())
		} else {
			k.dedup = fmt.Sprintf("d-%d", r.Uint64())
		}
		out[i] = k
	}
	return out
}

func routes(t *testing.T, m ShardMap, keys []key) []uint32 {
	t.Helper()
	tab := m.Table()
	if !tab.Valid() {
		t.Fatalf("invalid table %d slots, %d owners", tab.Slots, len(tab.Owners))
	}
	out := make([]uint32, len(keys))
	for i, k := range keys {
		s, ok := tab.ShardForMessage(k.queue, k.group, k.dedup)
		if !ok {
			t.Fatal("keyed message not routed")
		}
		out[i] = s
	}
	return out
}

// Growing from 1 to 3 shards and then to 5 adds shard groups and moves no
// key: the slot owners are materialized in the bootstrap layout, and a key
// routes to its old shard until the ROUTE step of a move of its slot,
// after which exactly the moved slots' keys go to the new owner.
func TestFSM_GrowShardsThenMoveSlots(t *testing.T) {
	f, apply := newFSMApply(t)
	nodes := []string{"n1", "n2", "n3"}
	mustOK(t, "place", apply(placeCmd(1, nodes)))
	keys := randomKeys(1000, 7)
	m := shardMapFromProto(f.ShardMap())
	before := routes(t, m, keys)
	for i, k := range keys {
		if legacy, _ := wire.ShardForMessage(k.queue, k.group, k.dedup, 1); before[i] != legacy {
			t.Fatalf("key %d: bootstrap table routes to %d, plain hash to %d", i, before[i], legacy)
		}
	}

	grow := func(count uint32, nodes []string) {
		t.Helper()
		m := shardMapFromProto(f.ShardMap())
		reps, err := PlanGrowth(m, count, nodes, 3)
		if err != nil {
			t.Fatal(err)
		}
		mustOK(t, fmt.Sprintf("grow to %d", count), apply(growCmd(count, reps)))
		g := shardMapFromProto(f.ShardMap())
		if g.Count != count || g.Version != m.Version+1 || g.Slots != 256 || len(g.SlotOwners) != 256 {
			t.Fatalf("grown map: count %d version %d (was %d) slots %d owners %d", g.Count, g.Version, m.Version, g.Slots, len(g.SlotOwners))
		}
		for id := m.Count; id < count; id++ {
			if !slices.Equal(g.Replicas[id], reps[id]) || g.Changes[id] != 0 || len(g.Learners[id]) != 0 {
				t.Fatalf("new shard %d: replicas %v changes %d learners %v, want %v, 0, none", id, g.Replicas[id], g.Changes[id], g.Learners[id], reps[id])
			}
			for _, n := range reps[id] {
				if g.RaftAddrs[n] != n+":7000" {
					t.Fatalf("node %s: raft address %q", n, g.RaftAddrs[n])
				}
			}
		}
		for id := uint32(0); id < m.Count; id++ {
			if !slices.Equal(g.Replicas[id], m.Replicas[id]) {
				t.Fatalf("old shard %d replicas changed: %v -> %v", id, m.Replicas[id], g.Replicas[id])
			}
		}
		if got := routes(t, g, keys); !slices.Equal(got, before) {
			t.Fatalf("growing to %d moved keys", count)
		}
		// The same growth again changes nothing.
		mustOK(t, "grow retried", apply(growCmd(count, reps)))
		if v := f.ShardMap().GetVersion(); v != g.Version {
			t.Fatalf("retried growth bumped the version %d -> %d", g.Version, v)
		}
	}
	moveAll := func() {
		t.Helper()
		m := shardMapFromProto(f.ShardMap())
		plan := PlanSlotMoves(m)
		if len(plan) == 0 {
			t.Fatal("no slot moves planned after growth")
		}
		for _, mv := range plan {
			mustOK(t, "seal", apply(slotStepCmd(mv, phSeal)))
			if got := routes(t, shardMapFromProto(f.ShardMap()), keys); !slices.Equal(got, before) {
				t.Fatalf("move %d: keys moved at seal", mv.ID)
			}
			mv.DedupUntilMs = 5000
			mustOK(t, "route", apply(slotStepCmd(mv, phRoute)))
			got := routes(t, shardMapFromProto(f.ShardMap()), keys)
			for i, k := range keys {
				slot, _ := wire.SlotForMessage(k.queue, k.group, k.dedup, 256)
				_, moved := slices.BinarySearch(mv.Slots, slot)
				switch {
				case moved && (before[i] != mv.From || got[i] != mv.To):
					t.Fatalf("move %d: key of moved slot %d routes %d -> %d, want %d -> %d", mv.ID, slot, before[i], got[i], mv.From, mv.To)
				case !moved && got[i] != before[i]:
					t.Fatalf("move %d: key of unmoved slot %d rerouted %d -> %d", mv.ID, slot, before[i], got[i])
				}
			}
			before = got
			mustOK(t, "done", apply(slotStepCmd(mv, phSDone)))
		}
		counts := SlotCounts(shardMapFromProto(f.ShardMap()))
		if lo, hi := slices.Min(counts), slices.Max(counts); hi-lo > 1 {
			t.Fatalf("slot counts after the moves %v", counts)
		}
	}
	grow(3, nodes)
	moveAll()
	grow(5, append(nodes, "n4", "n5"))
	moveAll()
	if len(PlanSlotMoves(shardMapFromProto(f.ShardMap()))) != 0 {
		t.Fatal("a balanced table plans moves")
	}
}

// Growth is refused when it would shrink, exceed the slot count or place
// the new shards badly, and accepted as a no-op only when it is the
// growth the map records.
func TestFSM_GrowShardsRules(t *testing.T) {
	f, apply := newFSMApply(t)
	nodes := []string{"n1", "n2", "n3"}
	mustCode(t, "grow with no map", apply(growCmd(2, map[uint32][]string{1: nodes})), metapb.Code_CODE_REFUSED, "no shard map")
	mustOK(t, "place", apply(placeCmd(2, nodes)))
	mustOK(t, "retire", apply(retireCmd("n9")))
	v := f.ShardMap().GetVersion()
	noAddr := growCmd(3, map[uint32][]string{2: {"n1", "n7"}})
	noAddr.GetGrowShards().Nodes = nil
	for _, tc := range []struct {
		name string
		cmd  *metapb.Command
		code metapb.Code
		msg  string
	}{
		{"shrink", growCmd(1, nil), metapb.Code_CODE_REFUSED, "only grows"},
		{"same count, other shards", growCmd(2, map[uint32][]string{1: {"n1"}}), metapb.Code_CODE_REFUSED, "has 2 shards already"},
		{"beyond the slots", growCmd(513, nil), metapb.Code_CODE_INVALID, "at most 512 shards"},
		{"a new shard missing", growCmd(4, map[uint32][]string{2: nodes}), metapb.Code_CODE_INVALID, "each of the 2 new shards"},
		{"an old shard placed", growCmd(3, map[uint32][]string{1: nodes}), metapb.Code_CODE_INVALID, "not shard 1"},
		{"two replicas on a node", growCmd(3, map[uint32][]string{2: {"n1", "n1"}}), metapb.Code_CODE_INVALID, "distinct nodes"},
		{"no replicas", growCmd(3, map[uint32][]string{2: {}}), metapb.Code_CODE_INVALID, "distinct nodes"},
		{"a retired node", growCmd(3, map[uint32][]string{2: {"n1", "n9"}}), metapb.Code_CODE_REFUSED, "retired"},
		{"no raft address", noAddr, metapb.Code_CODE_INVALID, "no raft address for node n7"},
	} {
		mustCode(t, tc.name, apply(tc.cmd), tc.code, tc.msg)
	}
	if got := f.ShardMap(); got.GetVersion() != v || got.GetCount() != 2 || len(got.GetSlotOwners()) != 0 {
		t.Fatalf("refused growths changed the map: %v", got)
	}
	// A known node needs no address in the command; the replicas of a
	// retried growth may be in another order (a preferred leader moved).
	known := growCmd(3, map[uint32][]string{2: {"n2", "n3"}})
	known.GetGrowShards().Nodes = nil
	mustOK(t, "grow onto known nodes", apply(known))
	mustOK(t, "retry, other order", apply(growCmd(3, map[uint32][]string{2: {"n3", "n2"}})))
	mustCode(t, "retry, other nodes", apply(growCmd(3, map[uint32][]string{2: {"n1", "n2"}})), metapb.Code_CODE_REFUSED, "has 3 shards already")
	m := shardMapFromProto(f.ShardMap())
	if m.Version != v+1 || m.Slots != 512 || len(m.SlotOwners) != 512 {
		t.Fatalf("map after growing: version %d (want %d), %d slots, %d owners", m.Version, v+1, m.Slots, len(m.SlotOwners))
	}
	for s, o := range m.SlotOwners {
		if o != uint32(s)%2 {
			t.Fatalf("slot %d owned by %d, want the bootstrap owner %d", s, o, s%2)
		}
	}
}

// Through a real (one-voter) meta group: the growth and slot move kinds
// wait for log format 4, then grow the map and walk a slot move, with
// refusals surfacing as ErrRefused.
func TestStore_GrowShardsAndSlotMoves(t *testing.T) {
	s := mustOpenSingle(t, t.TempDir(), true)
	waitLeader(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := s.PlaceShards(ctx, 1, 1); err != nil {
		t.Fatal(err)
	}
	m := s.ShardMap()
	reps, err := PlanGrowth(m, 2, []string{"m1"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RecordNodeFormat(ctx, "m1", 3); err != nil {
		t.Fatal(err)
	}
	var lag *fsm.FormatLagError
	if err := s.GrowShards(ctx, 2, reps, m.RaftAddrs); !errors.As(err, &lag) || lag.Need != 4 || lag.Kind != "grow_shards" {
		t.Fatalf("growth with m1 at format 3: %v, want a FormatLagError for grow_shards", err)
	}
	if err := s.RecordNodeFormat(ctx, "m1", fsm.LogFormat); err != nil {
		t.Fatal(err)
	}
	for try := 0; try < 2; try++ {
		if err := s.GrowShards(ctx, 2, reps, m.RaftAddrs); err != nil {
			t.Fatalf("grow (try %d): %v", try, err)
		}
	}
	if err := s.GrowShards(ctx, 1, nil, nil); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "only grows") {
		t.Fatalf("shrink: %v, want ErrRefused", err)
	}
	g := s.ShardMap()
	if g.Count != 2 || !slices.Equal(g.Replicas[1], []string{"m1"}) || len(g.SlotOwners) != 256 {
		t.Fatalf("grown map: %d shards, shard 1 on %v, %d owners", g.Count, g.Replicas[1], len(g.SlotOwners))
	}
	plan := PlanSlotMoves(g)
	if len(plan) != 1 || len(plan[0].Slots) != 128 || plan[0].From != 0 || plan[0].To != 1 {
		t.Fatalf("plan %+v", plan)
	}
	mv := plan[0]
	mv.DedupUntilMs = time.Now().Add(time.Hour).UnixMilli()
	for _, ph := range []metapb.SlotMovePhase{phSeal, phRoute} {
		if err := s.SlotMoveStep(ctx, mv, ph); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AbortSlotMove(ctx, mv.ID); !errors.Is(err, ErrRefused) {
		t.Fatalf("abort at route: %v, want ErrRefused", err)
	}
	if err := s.SlotMoveStep(ctx, mv, phSDone); err != nil {
		t.Fatal(err)
	}
	if err := s.ForgetSlotMove(ctx, mv.ID); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "dedup window") {
		t.Fatalf("forget within the dedup window: %v, want ErrRefused", err)
	}
	if c := SlotCounts(s.ShardMap()); !slices.Equal(c, []int{128, 128}) {
		t.Fatalf("slot counts %v", c)
	}
	if rec, ok := s.ShardMap().SlotMoveOf(mv.ID); !ok || rec.Phase != phSDone || rec.DedupUntilMs != mv.DedupUntilMs {
		t.Fatalf("record %+v (%v)", rec, ok)
	}
}
