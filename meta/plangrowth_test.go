package meta

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/raftq/raftq/meta/metapb"
	"github.com/raftq/raftq/wire"
)

// minimalSlotMoves is the fewest slots any balancing moves: the surplus
// over the targets when the shards owning the most get the ceilings.
func minimalSlotMoves(have []int, slots int) int {
	sorted := slices.Clone(have)
	slices.SortFunc(sorted, func(a, b int) int { return cmp.Compare(b, a) })
	q, r := slots/len(have), slots%len(have)
	moved := 0
	for i, c := range sorted {
		t := q
		if i < r {
			t = q + 1
		}
		moved += max(0, c-t)
	}
	return moved
}

// Over random tables (any owners, any count, some running and done
// moves), the planned moves balance every shard to floor or ceil of its
// share, move the fewest slots, never move a slot twice or a slot of a
// running move, take only from shards above their share to shards below
// it, pair each (from, to) once, and are the same plan twice.
func TestPlanSlotMoves_Properties(t *testing.T) {
	r := rand.New(rand.NewPCG(42, 2))
	for iter := 0; iter < 300; iter++ {
		boot := uint32(1 + r.IntN(4))
		slots := boot * wire.SlotsPerShard
		count := boot + uint32(r.IntN(int(boot)*3+2))
		m := ShardMap{Version: 1, Count: count, Slots: slots, SlotOwners: make([]uint32, slots), NextSlotMoveID: uint64(1 + r.IntN(9))}
		skew := r.IntN(3) // 0: uniform, 1: old shards only, 2: one heavy shard
		for s := range m.SlotOwners {
			switch skew {
			case 0:
				m.SlotOwners[s] = uint32(r.IntN(int(count)))
			case 1:
				m.SlotOwners[s] = uint32(s) % boot
			default:
				m.SlotOwners[s] = uint32(r.IntN(int(count)))
				if r.IntN(2) == 0 {
					m.SlotOwners[s] = 0
				}
			}
		}
		running := map[uint32]bool{}
		if r.IntN(2) == 0 && count > 1 { // a running move of a few slots of shard 0
			var sl []uint32
			for s, o := range m.SlotOwners {
				if o == 0 && r.IntN(20) == 0 {
					sl = append(sl, uint32(s))
					running[uint32(s)] = true
				}
			}
			if len(sl) > 0 {
				m.SlotMoves = append(m.SlotMoves, SlotMove{ID: 1, Slots: sl, From: 0, To: 1, Phase: metapb.SlotMovePhase_SLOT_MOVE_PHASE_SEAL})
			}
		}
		have := SlotCounts(m)
		plan := PlanSlotMoves(m)
		if again := PlanSlotMoves(m); fmt.Sprint(again) != fmt.Sprint(plan) {
			t.Fatalf("iter %d: plan not deterministic", iter)
		}
		q := int(slots / count)
		after := slices.Clone(have)
		owner := slices.Clone(m.SlotOwners)
		for _, mv := range m.SlotMoves {
			for _, s := range mv.Slots {
				owner[s] = mv.To
			}
		}
		movedOnce := map[uint32]bool{}
		pairs := map[[2]uint32]bool{}
		total := 0
		for i, mv := range plan {
			if mv.ID != m.NextSlotMoveID+uint64(i) || mv.Phase != 0 || len(mv.Slots) == 0 || mv.From == mv.To || mv.From >= count || mv.To >= count {
				t.Fatalf("iter %d: move %+v", iter, mv)
			}
			if !slices.IsSorted(mv.Slots) {
				t.Fatalf("iter %d: move %d slots unsorted", iter, mv.ID)
			}
			if pairs[[2]uint32{mv.From, mv.To}] {
				t.Fatalf("iter %d: pair %d->%d planned twice", iter, mv.From, mv.To)
			}
			pairs[[2]uint32{mv.From, mv.To}] = true
			if have[mv.From] <= q || have[mv.To] > q {
				t.Fatalf("iter %d: move %d from shard %d (%d slots) to %d (%d), share %d", iter, mv.ID, mv.From, have[mv.From], mv.To, have[mv.To], q)
			}
			for _, s := range mv.Slots {
				if movedOnce[s] || running[s] || owner[s] != mv.From {
					t.Fatalf("iter %d: slot %d moved twice (%v), running (%v) or not on %d (on %d)", iter, s, movedOnce[s], running[s], mv.From, owner[s])
				}
				movedOnce[s] = true
				owner[s] = mv.To
			}
			after[mv.From] -= len(mv.Slots)
			after[mv.To] += len(mv.Slots)
			total += len(mv.Slots)
		}
		// Every shard ends at its share; a shard giving never drops below
		// it, one taking never rises above it.
		for sh, c := range after {
			if c != q && c != q+1 {
				t.Fatalf("iter %d: shard %d ends with %d slots, share %d (have %v, after %v)", iter, sh, c, q, have, after)
			}
		}
		if want := minimalSlotMoves(have, int(slots)); total != want {
			t.Fatalf("iter %d: moved %d slots, the fewest is %d", iter, total, want)
		}
	}
}

// The planner gives away slots no recorded move touched first, so a dedup
// look-up follows one move at most when it can.
func TestPlanSlotMoves_PrefersSlotsNoMoveTouched(t *testing.T) {
	m := ShardMap{Version: 1, Count: 2, Slots: 256, SlotOwners: make([]uint32, 256), NextSlotMoveID: 2,
		SlotMoves: []SlotMove{{ID: 1, Slots: []uint32{0, 1, 2, 3}, From: 1, To: 0, Phase: metapb.SlotMovePhase_SLOT_MOVE_PHASE_DONE}}}
	plan := PlanSlotMoves(m)
	if len(plan) != 1 || plan[0].From != 0 || plan[0].To != 1 || len(plan[0].Slots) != 128 || plan[0].ID != 2 {
		t.Fatalf("plan %+v", plan)
	}
	if plan[0].Slots[0] != 4 || plan[0].Slots[127] != 131 {
		t.Fatalf("slots %d..%d moved, want 4..131", plan[0].Slots[0], plan[0].Slots[127])
	}
}

// growChecked plans the growth of m to count over nodes, checks that no
// new shard has two replicas on a node, that the plan does not depend on
// the order of nodes, and that replica counts end within 1 and preferred
// leader counts within leaderSpread; it returns the grown map.
func growChecked(t *testing.T, iter int, m ShardMap, count uint32, nodes []string, rf, leaderSpread int) ShardMap {
	t.Helper()
	plan, err := PlanGrowth(m, count, nodes, rf)
	if err != nil {
		t.Fatal(err)
	}
	rev := slices.Clone(nodes)
	slices.Reverse(rev)
	if again, _ := PlanGrowth(m, count, rev, rf); fmt.Sprint(plan) != fmt.Sprint(again) {
		t.Fatalf("iter %d: plan depends on the order of nodes", iter)
	}
	if len(plan) != int(count-m.Count) {
		t.Fatalf("iter %d: %d shards placed, want %d", iter, len(plan), count-m.Count)
	}
	g := m.Clone()
	for s := m.Count; s < count; s++ {
		reps := plan[s]
		if len(reps) != rf || len(slices.Compact(slices.Sorted(slices.Values(reps)))) != rf {
			t.Fatalf("iter %d: shard %d replicas %v, want %d distinct", iter, s, reps, rf)
		}
		g.Replicas[s] = reps
	}
	g.Count = count
	reps, leads := counts(g, nodes)
	if lo, hi := spread(reps, nodes); hi-lo > 1 {
		t.Fatalf("iter %d: replica counts %v", iter, reps)
	}
	if lo, hi := spread(leads, nodes); hi-lo > leaderSpread {
		t.Fatalf("iter %d: preferred leader counts %v, want within %d", iter, leads, leaderSpread)
	}
	return g
}

// New shards' replicas never share a node, and over random maps the
// growth keeps every node's replica count within 1 of the others'. The
// first growth of a one-shard map balances the preferred leaders within
// 1; a later one keeps the old shards' preferences, so within 2 (the
// rebalancer evens out the rest).
func TestPlanGrowth_BalancesAndNeverColocates(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	for iter := 0; iter < 300; iter++ {
		nodes := nodeIDs(2 + r.IntN(7))
		rf := 1 + r.IntN(min(3, len(nodes)))
		m := ShardMap{Version: 1, Count: 1, Replicas: map[uint32][]string{0: slices.Clone(nodes[:rf])}}
		m = growChecked(t, iter, m, uint32(2+r.IntN(12)), nodes, rf, 1)
		growChecked(t, iter, m, m.Count+uint32(1+r.IntN(int(m.Count)*3)), nodes, rf, 2)
	}
}

func TestPlanGrowth_Refusals(t *testing.T) {
	m := mapOf([]string{"n1", "n2"}, []string{"n2", "n1"})
	for name, tc := range map[string]struct {
		m     ShardMap
		count uint32
		nodes []string
	}{
		"no map":       {ShardMap{}, 3, []string{"n1"}},
		"shrink":       {m, 1, []string{"n1"}},
		"same":         {m, 2, []string{"n1"}},
		"beyond slots": {m, 513, []string{"n1"}},
		"no nodes":     {m, 3, nil},
	} {
		if _, err := PlanGrowth(tc.m, tc.count, tc.nodes, 3); err == nil {
			t.Errorf("%s: planned", name)
		}
	}
	plan, err := PlanGrowth(m, 4, []string{"n1", "n2"}, 3)
	if err != nil || len(plan[2]) != 2 || len(plan[3]) != 2 || plan[2][0] == plan[3][0] {
		t.Fatalf("replication capped at the nodes: %v %v", plan, err)
	}
}
