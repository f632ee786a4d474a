package meta

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/raftq/raftq/meta/metapb"
)

func mapOf(replicas ...[]string) ShardMap {
	m := ShardMap{Version: 1, Count: uint32(len(replicas)), Replicas: map[uint32][]string{}}
	for i, r := range replicas {
		m.Replicas[uint32(i)] = r
	}
	return m
}

// applyPlan carries a plan out on a copy of m the way the FSM does
// (promote appends the target, done drops the source; a leader change
// moves the node first), checking every step is one the FSM accepts.
func applyPlan(t *testing.T, m ShardMap, p BalancePlan) ShardMap {
	t.Helper()
	m = m.Clone()
	for _, mv := range m.Moves {
		r := m.Replicas[mv.Shard]
		if !slices.Contains(r, mv.To) {
			r = append(r, mv.To)
		}
		m.Replicas[mv.Shard] = slices.DeleteFunc(r, func(n string) bool { return n == mv.From })
	}
	m.Moves = nil
	for _, mv := range p.TopUps {
		r := m.Replicas[mv.Shard]
		if mv.From != "" || slices.Contains(r, mv.To) {
			t.Fatalf("top-up %+v invalid on %v", mv, r)
		}
		m.Replicas[mv.Shard] = append(r, mv.To)
	}
	for _, mv := range p.Moves {
		r := m.Replicas[mv.Shard]
		if !slices.Contains(r, mv.From) || slices.Contains(r, mv.To) || mv.From == mv.To {
			t.Fatalf("move %+v invalid on %v", mv, r)
		}
		m.Replicas[mv.Shard] = append(slices.DeleteFunc(r, func(n string) bool { return n == mv.From }), mv.To)
	}
	for _, lc := range p.Leaders {
		r := m.Replicas[lc.Shard]
		i := slices.Index(r, lc.To)
		if i < 0 || (len(r) > 0 && r[0] != lc.From) {
			t.Fatalf("leader change %+v invalid on %v", lc, r)
		}
		m.Replicas[lc.Shard] = append([]string{lc.To}, slices.Delete(r, i, i+1)...)
	}
	return m
}

func counts(m ShardMap, nodes []string) (replicas, leaders map[string]int) {
	replicas, leaders = map[string]int{}, map[string]int{}
	for id := uint32(0); id < m.Count; id++ {
		for i, n := range m.Replicas[id] {
			if slices.Contains(nodes, n) {
				replicas[n]++
				if i == 0 {
					leaders[n]++
				}
			}
		}
	}
	return replicas, leaders
}

func spread(c map[string]int, nodes []string) (lo, hi int) {
	lo, hi = 1<<30, -1
	for _, n := range nodes {
		lo, hi = min(lo, c[n]), max(hi, c[n])
	}
	return lo, hi
}

func TestPlanBalance_NewNodeGetsItsShare(t *testing.T) {
	m := mapOf([]string{"n1", "n2", "n3"}, []string{"n2", "n3", "n1"}, []string{"n3", "n1", "n2"}, []string{"n1", "n3", "n2"})
	nodes := []string{"n1", "n2", "n3", "n4"}
	p := PlanBalance(m, nodes, 0)
	if len(p.Moves) != 3 {
		t.Fatalf("moves %+v, want 3 (12 replicas over 4 nodes: 3 each)", p.Moves)
	}
	for _, mv := range p.Moves {
		if mv.To != "n4" {
			t.Errorf("move %+v not onto n4", mv)
		}
	}
	after := applyPlan(t, m, p)
	rc, lc := counts(after, nodes)
	for _, n := range nodes {
		if rc[n] != 3 || lc[n] != 1 {
			t.Errorf("%s: %d replicas, %d preferred; want 3 and 1 (%v)", n, rc[n], lc[n], after.Replicas)
		}
	}
	want := []NodeBalance{{"n1", 4, 3, 2, 1}, {"n2", 4, 3, 1, 1}, {"n3", 4, 3, 1, 1}, {"n4", 0, 3, 0, 1}}
	if !slices.Equal(p.Nodes, want) {
		t.Errorf("nodes %+v, want %+v", p.Nodes, want)
	}
	if again := PlanBalance(after, nodes, 0); !again.Empty() {
		t.Errorf("a balanced map plans %+v", again)
	}
}

func TestPlanBalance_BalancedOrTooFewShardsIsEmpty(t *testing.T) {
	for _, tc := range []struct {
		name  string
		m     ShardMap
		nodes []string
	}{
		{"one shard, a fourth node", mapOf([]string{"n1", "n2", "n3"}), []string{"n1", "n2", "n3", "n4"}},
		{"three shards over three", mapOf([]string{"n1", "n2", "n3"}, []string{"n2", "n3", "n1"}, []string{"n3", "n1", "n2"}), []string{"n1", "n2", "n3"}},
		{"no eligible node", mapOf([]string{"n1", "n2", "n3"}), nil},
		{"no shard", mapOf(), []string{"n1"}},
	} {
		if p := PlanBalance(tc.m, tc.nodes, 0); !p.Empty() {
			t.Errorf("%s: plan %+v, want none", tc.name, p)
		}
	}
}

func TestPlanBalance_LeavesIneligibleNodesAlone(t *testing.T) {
	// n3 is draining or dead: its replicas stay for the drain to move, and
	// it is neither a source nor a target; n4 is new.
	m := mapOf([]string{"n3", "n1", "n2"}, []string{"n1", "n2", "n3"}, []string{"n2", "n1", "n3"}, []string{"n1", "n2", "n3"})
	m.Retired = []string{"n5"}
	nodes := []string{"n1", "n2", "n4"}
	p := PlanBalance(m, nodes, 0)
	for _, mv := range p.Moves {
		if mv.From == "n3" || mv.To == "n3" {
			t.Errorf("move %+v touches the ineligible n3", mv)
		}
	}
	if len(p.Moves) != 2 {
		t.Errorf("moves %+v, want 2 (8 eligible replicas over 3 nodes: 3,3,2)", p.Moves)
	}
	after := applyPlan(t, m, p)
	rc, lc := counts(after, nodes)
	if lo, hi := spread(rc, nodes); hi-lo > 1 {
		t.Errorf("replicas %v", rc)
	}
	if lo, hi := spread(lc, nodes); hi-lo > 1 || lc["n1"]+lc["n2"]+lc["n4"] != 4 {
		t.Errorf("preferred leaders %v (%v): shard 0's preferred n3 is ineligible and must be replaced", lc, after.Replicas)
	}
}

func TestPlanBalance_RunningMoveCountsAsDone(t *testing.T) {
	m := mapOf([]string{"n1", "n2", "n3"}, []string{"n2", "n3", "n1"}, []string{"n3", "n1", "n2"}, []string{"n1", "n3", "n2"})
	m.Learners = map[uint32][]string{0: {"n4"}}
	m.Moves = []Move{{Shard: 0, From: "n1", To: "n4", Phase: metapb.MovePhase_MOVE_PHASE_ADD}}
	p := PlanBalance(m, []string{"n1", "n2", "n3", "n4"}, 0)
	if len(p.Moves) != 2 {
		t.Fatalf("moves %+v, want the 2 left after the running one", p.Moves)
	}
	for _, mv := range p.Moves {
		if mv.Shard == 0 || mv.From == "n1" || mv.To != "n4" {
			t.Errorf("move %+v: shard 0 is on n4 already and n1 is at its share", mv)
		}
	}
}

func TestPlanBalance_IsDeterministic(t *testing.T) {
	m := mapOf([]string{"a", "b", "c"}, []string{"a", "b", "c"}, []string{"a", "b", "c"}, []string{"a", "b", "c"}, []string{"a", "b", "c"})
	p1 := PlanBalance(m, []string{"e", "d", "c", "b", "a"}, 0)
	p2 := PlanBalance(m.Clone(), []string{"a", "b", "c", "d", "e", "a"}, 0)
	if fmt.Sprint(p1) != fmt.Sprint(p2) {
		t.Fatalf("plans differ:\n%+v\n%+v", p1, p2)
	}
}

// Random maps, eligible sets and running moves: every plan is valid step
// by step, ends balanced (replicas within 1; preferred leaders within 1
// whenever the replicas allow it), moves no replica more than needed, and
// is empty when planned again.
func TestPlanBalance_Properties(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 1))
	for iter := range 3000 {
		nNodes := 1 + rng.IntN(7)
		all := make([]string, nNodes+2) // two more that are ineligible
		for i := range all {
			all[i] = fmt.Sprintf("n%d", i+1)
		}
		repl := 1 + rng.IntN(min(3, nNodes))
		count := 1 + rng.IntN(12)
		m := ShardMap{Version: 1, Count: uint32(count), Replicas: map[uint32][]string{}}
		for id := range uint32(count) {
			perm := rng.Perm(len(all))
			for _, i := range perm[:repl] {
				m.Replicas[id] = append(m.Replicas[id], all[i])
			}
			if rng.IntN(8) == 0 { // a running move
				free := slices.DeleteFunc(slices.Clone(all), func(n string) bool { return slices.Contains(m.Replicas[id], n) })
				if len(free) > 0 {
					mv := Move{Shard: id, From: m.Replicas[id][rng.IntN(repl)], To: free[rng.IntN(len(free))], Phase: metapb.MovePhase_MOVE_PHASE_ADD}
					m.Moves = append(m.Moves, mv)
				}
			}
		}
		eligible := slices.Clone(all[:nNodes])
		rng.Shuffle(len(eligible), func(i, j int) { eligible[i], eligible[j] = eligible[j], eligible[i] })
		slices.Sort(eligible)
		p := PlanBalance(m, eligible, 0)
		name := fmt.Sprintf("iter %d: %v over %v moves %v", iter, m.Replicas, eligible, m.Moves)
		after := applyPlan(t, m, p)
		projected := applyPlan(t, m, BalancePlan{})
		before, _ := counts(projected, eligible)
		rc, lc := counts(after, eligible)
		if lo, hi := spread(rc, eligible); hi-lo > 1 {
			t.Fatalf("%s: replicas %v after %+v", name, rc, p.Moves)
		}
		// The fewest moves: the r most loaded nodes keep q+1, the rest q;
		// each replica above that must move, and no more.
		total := 0
		for _, n := range eligible {
			total += before[n]
		}
		q, r := total/len(eligible), total%len(eligible)
		byLoad := slices.Clone(eligible)
		slices.SortStableFunc(byLoad, func(a, b string) int { return before[b] - before[a] })
		need := 0
		for i, n := range byLoad {
			tgt := q
			if i < r {
				tgt++
			}
			need += max(0, before[n]-tgt)
		}
		if len(p.Moves) != need {
			t.Fatalf("%s: %d moves %+v, the fewest is %d", name, len(p.Moves), p.Moves, need)
		}
		src, dst := map[string]bool{}, map[string]bool{}
		for _, mv := range p.Moves {
			src[mv.From], dst[mv.To] = true, true
			if !slices.Contains(eligible, mv.From) || !slices.Contains(eligible, mv.To) {
				t.Fatalf("%s: move %+v involves an ineligible node", name, mv)
			}
		}
		for n := range src {
			if dst[n] || rc[n] < q {
				t.Fatalf("%s: %s gives and takes, or gave below its share: %+v", name, n, p.Moves)
			}
		}
		for _, lch := range p.Leaders {
			if !slices.Contains(eligible, lch.To) {
				t.Fatalf("%s: leader change %+v to an ineligible node", name, lch)
			}
		}
		if repl >= 2 && len(m.Moves) == 0 {
			shards := 0
			for id := range uint32(count) {
				if slices.ContainsFunc(after.Replicas[id], func(n string) bool { return slices.Contains(eligible, n) }) {
					shards++
				}
			}
			lq := shards / len(eligible)
			lhi := lq
			if shards%len(eligible) > 0 {
				lhi++
			}
			for _, n := range eligible {
				if lc[n] < lq || lc[n] > lhi {
					if leadersFeasible(after, eligible, lq, lhi) {
						t.Fatalf("%s: preferred leaders %v after %+v, want each in [%d,%d]", name, lc, p.Leaders, lq, lhi)
					}
					break
				}
			}
		}
		if again := PlanBalance(after, eligible, 0); !again.Empty() {
			t.Fatalf("%s: planned again: %+v", name, again)
		}
		// The meta leader takes one step and plans again: the rest of the
		// plan never grows, so stepping converges in as many steps.
		if len(p.Moves) > 0 {
			step := applyPlan(t, m, BalancePlan{Moves: p.Moves[:1]})
			if next := PlanBalance(step, eligible, 0); len(next.Moves) != len(p.Moves)-1 {
				t.Fatalf("%s: after %+v the plan has %d moves, want %d", name, p.Moves[0], len(next.Moves), len(p.Moves)-1)
			}
		} else if len(p.Leaders) > 0 {
			step := applyPlan(t, m, BalancePlan{Leaders: p.Leaders[:1]})
			if next := PlanBalance(step, eligible, 0); len(next.Moves) != 0 || len(next.Leaders) > len(p.Leaders)-1 {
				t.Fatalf("%s: after %+v the plan is %+v, want at most %d leader changes", name, p.Leaders[0], next, len(p.Leaders)-1)
			}
		}
	}
}

// leadersFeasible reports by brute force whether every shard with an
// eligible voter can prefer one so that every node prefers lo..hi shards.
func leadersFeasible(m ShardMap, nodes []string, lo, hi int) bool {
	led := map[string]int{}
	var rec func(id uint32) bool
	rec = func(id uint32) bool {
		if id == m.Count {
			for _, n := range nodes {
				if led[n] < lo || led[n] > hi {
					return false
				}
			}
			return true
		}
		any := false
		for _, n := range m.Replicas[id] {
			if !slices.Contains(nodes, n) {
				continue
			}
			any = true
			if led[n] < hi {
				led[n]++
				ok := rec(id + 1)
				led[n]--
				if ok {
					return true
				}
			}
		}
		return !any && rec(id+1)
	}
	return rec(0)
}

// Short shards are topped up to the replication on the eligible nodes
// holding the fewest, never onto a holder, before the counts are
// balanced; a planned-again map needs nothing, and one top-up taken
// leaves the rest of the plan's top-ups.
func TestPlanBalance_TopsUpShortShards(t *testing.T) {
	m := mapOf([]string{"n1"}, []string{"n1", "n2"}, []string{"n1", "n2", "n3"}, []string{"n5"})
	p := PlanBalance(m, []string{"n1", "n2", "n3", "n4"}, 3)
	want := []PlannedMove{{Shard: 0, To: "n4"}, {Shard: 0, To: "n3"}, {Shard: 1, To: "n4"}, {Shard: 3, To: "n2"}, {Shard: 3, To: "n3"}}
	if fmt.Sprint(p.TopUps) != fmt.Sprint(want) {
		t.Fatalf("top-ups %+v, want %+v", p.TopUps, want)
	}
	if none := PlanBalance(m, []string{"n1", "n2", "n3", "n4"}, 0); len(none.TopUps) != 0 {
		t.Fatalf("replication 0 topped up: %+v", none.TopUps)
	}
	// One replica and one node free: at replication 3 the shard would stop
	// at two voters that need each other, so it stays; at 2 it is asked for.
	single := mapOf([]string{"n1"})
	if p := PlanBalance(single, []string{"n1", "n2"}, 3); len(p.TopUps) != 0 {
		t.Fatalf("a single replica topped up to two of three: %+v", p.TopUps)
	}
	if p := PlanBalance(single, []string{"n1", "n2"}, 2); fmt.Sprint(p.TopUps) != fmt.Sprint([]PlannedMove{{Shard: 0, To: "n2"}}) {
		t.Fatalf("replication 2: top-ups %+v", p.TopUps)
	}

	rng := rand.New(rand.NewPCG(35, 2))
	for iter := range 2000 {
		nNodes := 1 + rng.IntN(6)
		all := make([]string, nNodes+1) // one more that is ineligible
		for i := range all {
			all[i] = fmt.Sprintf("n%d", i+1)
		}
		repl := 1 + rng.IntN(4)
		count := 1 + rng.IntN(8)
		m := ShardMap{Version: 1, Count: uint32(count), Replicas: map[uint32][]string{}}
		for id := range uint32(count) {
			for _, i := range rng.Perm(len(all))[:1+rng.IntN(min(repl, len(all)))] {
				m.Replicas[id] = append(m.Replicas[id], all[i])
			}
		}
		eligible := all[:nNodes]
		p := PlanBalance(m, eligible, repl)
		name := fmt.Sprintf("iter %d: %v over %v replication %d", iter, m.Replicas, eligible, repl)
		after := applyPlan(t, m, p)
		for id := range uint32(count) {
			before := m.Replicas[id]
			reach := len(before)
			for _, n := range eligible {
				if !slices.Contains(before, n) {
					reach++
				}
			}
			want := max(len(before), min(repl, reach))
			if len(before) == 1 && repl >= 3 && reach < 3 {
				want = 1 // two voters would need each other
			}
			if len(after.Replicas[id]) != want {
				t.Fatalf("%s: shard %d has %v after %+v, want %d replicas", name, id, after.Replicas[id], p, want)
			}
		}
		rc, _ := counts(after, eligible)
		if lo, hi := spread(rc, eligible); hi-lo > 1 {
			t.Fatalf("%s: replicas %v after %+v", name, rc, p)
		}
		if again := PlanBalance(after, eligible, repl); len(again.TopUps)+len(again.Moves) != 0 {
			t.Fatalf("%s: planned again: %+v", name, again)
		}
		if len(p.TopUps) > 0 {
			step := applyPlan(t, m, BalancePlan{TopUps: p.TopUps[:1]})
			if next := PlanBalance(step, eligible, repl); len(next.TopUps) != len(p.TopUps)-1 {
				t.Fatalf("%s: after %+v the plan has %d top-ups, want %d", name, p.TopUps[0], len(next.TopUps), len(p.TopUps)-1)
			}
		}
	}
}
