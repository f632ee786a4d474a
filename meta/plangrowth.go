package meta

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// The growth planners are pure functions of the shard map and their
// arguments, like the balance planner (meta/balance.go): every node
// computes the same plan, so a dry run shows what the meta leader does.

// PlanGrowth places the replicas of the shards a growth to count adds
// (ids m.Count to count-1) over nodes, the nodes that may hold replicas
// (live, not draining, not retired; the caller decides). Each new shard
// takes the replication nodes holding the fewest replicas (running moves
// taken as finished, as PlanBalance does; ties to the node preferred by
// the fewest shards, then by rendezvous rank as Place does, then id), so
// replica counts stay within 1 of each other when they start so. The new
// shards' preferred leaders are then chosen among their replicas to even
// out the preferred-leader counts as far as the old shards' preferences
// (which stay) allow; the rebalancer (PlanBalance) does the rest. A shard
// never has two replicas on one node; replication is capped at len(nodes).
func PlanGrowth(m ShardMap, count uint32, nodes []string, replication int) (map[uint32][]string, error) {
	ids := slices.Compact(slices.Sorted(slices.Values(nodes)))
	switch {
	case !m.Placed():
		return nil, errors.New("plan growth: no shard map is placed")
	case count <= m.Count:
		return nil, fmt.Errorf("plan growth: the shard count only grows; the cluster has %d shards, not fewer than %d", m.Count, count)
	case count > m.Table().Slots:
		return nil, fmt.Errorf("plan growth: the cluster has %d hash slots, so at most %d shards", m.Table().Slots, m.Table().Slots)
	case len(ids) == 0 || slices.Contains(ids, ""):
		return nil, errors.New("plan growth: no nodes to place replicas on")
	case replication < 1:
		return nil, fmt.Errorf("plan growth: replication %d", replication)
	}
	replication = min(replication, len(ids))
	ok := make(map[string]bool, len(ids))
	for _, n := range ids {
		ok[n] = true
	}
	voters := projectedVoters(m)
	load := replicaCounts(voters, ok)
	led := preferredCounts(m.Count, voters, ok)
	out := make(map[uint32][]string, count-m.Count)
	for s := m.Count; s < count; s++ {
		ranked := slices.Clone(ids)
		slices.SortFunc(ranked, func(a, b string) int {
			if c := cmp.Compare(load[a], load[b]); c != 0 {
				return c
			}
			if c := cmp.Compare(led[a], led[b]); c != 0 {
				return c
			}
			if c := cmp.Compare(rendezvousScore(s, b), rendezvousScore(s, a)); c != 0 {
				return c
			}
			return cmp.Compare(a, b)
		})
		replicas := slices.Clone(ranked[:replication])
		for _, n := range replicas {
			load[n]++
		}
		out[s] = replicas
	}
	balanceNewLeaders(out, m.Count, count, ids, ok, led)
	return out, nil
}

// balanceNewLeaders picks the preferred leader of each new shard (ids from
// to count-1 in reps) among its replicas so that the eligible nodes'
// preferred counts, led (the old shards' preferences, which stay), end as
// even as those replica sets allow, by the chains of planLeaders
// (meta/balance.go); it moves each leader to the front of its replicas.
func balanceNewLeaders(reps map[uint32][]string, from, count uint32, nodes []string, ok map[string]bool, led map[string]int) {
	voters := make([][]string, count-from)
	pref := make([]string, count-from)
	for i := range voters {
		voters[i] = reps[from+uint32(i)]
		// The replica preferring the fewest, ties to the first.
		for _, n := range voters[i] {
			if pref[i] == "" || led[n] < led[pref[i]] {
				pref[i] = n
			}
		}
		led[pref[i]]++
	}
	total := 0
	for _, n := range nodes {
		total += led[n]
	}
	q, hi := total/len(nodes), (total+len(nodes)-1)/len(nodes)
	for shiftLeaders(pref, voters, nodes, ok, led, func(n string) bool { return led[n] > hi }, func(n string) bool { return led[n] < hi }) {
	}
	for shiftLeaders(pref, voters, nodes, ok, led, func(n string) bool { return led[n] > q }, func(n string) bool { return led[n] < q }) {
	}
	for i, v := range voters {
		j := slices.Index(v, pref[i])
		reps[from+uint32(i)] = append([]string{pref[i]}, slices.Delete(slices.Clone(v), j, j+1)...)
	}
}

// SlotCounts is the number of slots each shard owns, by shard id, with
// running slot moves taken as finished (their slots counted on To).
func SlotCounts(m ShardMap) []int {
	owners, _ := projectedOwners(m)
	out := make([]int, m.Count)
	for _, o := range owners {
		if o < m.Count {
			out[o]++
		}
	}
	return out
}

// projectedOwners is every slot's owner with the running slot moves
// finished, and which slots those moves hold (no new move may take them).
func projectedOwners(m ShardMap) (owners []uint32, locked map[uint32]bool) {
	t := m.Table()
	owners = make([]uint32, t.Slots)
	if !t.Valid() {
		return owners[:0], nil
	}
	for s := range owners {
		owners[s] = t.Owner(uint32(s))
	}
	locked = map[uint32]bool{}
	for _, mv := range m.RunningSlotMoves() {
		for _, s := range mv.Slots {
			if s < t.Slots {
				owners[s] = mv.To
				locked[s] = true
			}
		}
	}
	return owners, locked
}

// PlanSlotMoves is the slot moves that bring every shard to floor or ceil
// of Slots/Count slots, moving the fewest slots: the shards that own the
// most keep the ceilings (ties to the lowest id), and slots move only off
// shards above their target onto shards below it, the largest surplus
// giving to the largest deficit, so each (from, to) pair appears once.
// Running slot moves are taken as finished and their slots stay where the
// moves take them. Within a shard, slots no recorded move touched go
// first (a dedup look-up then follows one move at most), then the lowest.
// The moves carry ids from m.NextSlotMoveID on, in order, and no phase; a
// balanced map plans none.
func PlanSlotMoves(m ShardMap) []SlotMove {
	if m.Count == 0 {
		return nil
	}
	owners, locked := projectedOwners(m)
	if len(owners) == 0 {
		return nil
	}
	recorded := map[uint32]bool{}
	for _, mv := range m.SlotMoves {
		for _, s := range mv.Slots {
			recorded[s] = true
		}
	}
	// Each shard's movable slots in the order they are given away.
	movable := make([][]uint32, m.Count)
	for s, o := range owners {
		if o < m.Count && !locked[uint32(s)] {
			movable[o] = append(movable[o], uint32(s))
		}
	}
	for _, sl := range movable {
		slices.SortStableFunc(sl, func(a, b uint32) int { return cmpBool(recorded[a], recorded[b]) })
	}
	have := SlotCounts(m)
	target := slotTargets(have, uint32(len(owners)))
	id := max(m.NextSlotMoveID, 1)
	var plan []SlotMove
	for {
		from, to := -1, -1
		for i := range have {
			if sur := have[i] - target[i]; sur > 0 && len(movable[i]) > 0 && (from < 0 || sur > have[from]-target[from]) {
				from = i
			}
			if def := target[i] - have[i]; def > 0 && (to < 0 || def > target[to]-have[to]) {
				to = i
			}
		}
		if from < 0 || to < 0 {
			return plan
		}
		n := min(have[from]-target[from], target[to]-have[to], len(movable[from]))
		slots := slices.Clone(movable[from][:n])
		movable[from] = movable[from][n:]
		slices.Sort(slots)
		have[from] -= n
		have[to] += n
		plan = append(plan, SlotMove{ID: id, Slots: slots, From: uint32(from), To: uint32(to)})
		id++
	}
}

// slotTargets gives each shard floor(slots/count) slots, and one more to
// the slots%count shards owning the most (ties to the lowest id).
func slotTargets(have []int, slots uint32) []int {
	count := len(have)
	q, r := int(slots)/count, int(slots)%count
	byLoad := make([]int, count)
	for i := range byLoad {
		byLoad[i] = i
	}
	slices.SortStableFunc(byLoad, func(a, b int) int { return cmp.Compare(have[b], have[a]) })
	target := make([]int, count)
	for i, sh := range byLoad {
		target[sh] = q
		if i < r {
			target[sh] = q + 1
		}
	}
	return target
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}
