package meta

import (
	"cmp"
	"slices"
)

// The balance planner is a pure function of the shard map and the set of
// nodes that may hold replicas (live, admitted, not draining, not
// retired; the caller decides). Every node computes the same plan from
// the same inputs, so the dry run a node prints is the plan the meta
// leader carries out, one move at a time (cluster/rebalance.go).
//
// Replicas: the eligible nodes' replica counts end within 1 of their mean
// (each node at floor or ceil of it), moving only off nodes above their
// target and onto nodes below it, which is the fewest moves that gets
// there: every move takes one replica off a surplus and onto a deficit. A
// node above its target always holds a shard a node below its target
// lacks (it holds more), so no move ever places two replicas of a shard
// on one node. Replicas on ineligible nodes (dead, draining) are left
// where they are and count for neither the mean nor the targets: replacing
// those is the business of drains.
//
// Top-ups come first: a shard with fewer replicas than the cluster's
// replication (raised since, or grown before enough nodes were eligible)
// gets a replica on the eligible node holding the fewest that lacks it,
// until it has enough or no eligible node is left; a shard on one replica
// only if it can reach three (planTopUps). A top-up removes nothing, so
// it is taken before any move, which then balances the counts the top-ups
// leave.
//
// Leaders: each shard's preferred leader (its first voter in the map) is
// chosen among its eligible voters so that every eligible node prefers
// within 1 of the mean number of shards, changing as few preferences as it
// can: a shard whose preferred node is ineligible gets the eligible voter
// preferring the fewest, then preferences move along the shortest chains
// of shards from the most to the least preferred nodes.

// PlannedMove is one replica move of a plan.
type PlannedMove struct {
	Shard    uint32
	From, To string
}

// LeaderChange makes To the preferred leader of Shard instead of From
// ("" when the shard had no voter).
type LeaderChange struct {
	Shard    uint32
	From, To string
}

// NodeBalance is one eligible node's replica and preferred-leader counts,
// now and once the plan is carried out.
type NodeBalance struct {
	Node                    string
	Replicas, ReplicasAfter int
	Leaders, LeadersAfter   int
}

// BalancePlan is what it takes to balance the map over the eligible nodes.
type BalancePlan struct {
	// TopUps add a replica to a shard short of the replication (From is
	// ""); they go before Moves.
	TopUps  []PlannedMove
	Moves   []PlannedMove
	Leaders []LeaderChange
	Nodes   []NodeBalance // sorted by node id
}

// Empty reports whether the map is balanced already.
func (p BalancePlan) Empty() bool {
	return len(p.TopUps) == 0 && len(p.Moves) == 0 && len(p.Leaders) == 0
}

// PlanBalance computes the plan for m over the eligible nodes, topping
// shards up to replication replicas (0: no top-ups). A running move is
// taken as finished (its target holds the shard, its source does not), so
// the plan is what remains after it.
func PlanBalance(m ShardMap, eligible []string, replication int) BalancePlan {
	nodes := slices.Clone(eligible)
	slices.Sort(nodes)
	nodes = slices.Compact(nodes)
	ok := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		ok[n] = true
	}
	voters := projectedVoters(m)
	var plan BalancePlan
	if len(nodes) == 0 {
		return plan
	}
	now := replicaCounts(voters, ok)
	plan.TopUps = planTopUps(voters, nodes, ok, replication)
	plan.Moves = planMoves(voters, nodes, ok)
	after := replicaCounts(voters, ok) // planTopUps and planMoves applied theirs
	leadNow := preferredCounts(m.Count, projectedVoters(m), ok)
	plan.Leaders = planLeaders(m.Count, voters, nodes, ok)
	leadAfter := preferredCounts(m.Count, voters, ok)
	for _, n := range nodes {
		plan.Nodes = append(plan.Nodes, NodeBalance{Node: n, Replicas: now[n], ReplicasAfter: after[n], Leaders: leadNow[n], LeadersAfter: leadAfter[n]})
	}
	return plan
}

// projectedVoters is each shard's replica list with the running moves
// finished: a move's target appended (as the promote step does), its
// source dropped.
func projectedVoters(m ShardMap) [][]string {
	out := make([][]string, m.Count)
	for id := uint32(0); id < m.Count; id++ {
		out[id] = slices.Clone(m.Replicas[id])
	}
	for _, mv := range m.Moves {
		if mv.Shard >= m.Count {
			continue
		}
		v := out[mv.Shard]
		if !slices.Contains(v, mv.To) {
			v = append(v, mv.To)
		}
		out[mv.Shard] = slices.DeleteFunc(v, func(n string) bool { return n == mv.From })
	}
	return out
}

func replicaCounts(voters [][]string, ok map[string]bool) map[string]int {
	out := map[string]int{}
	for _, v := range voters {
		for _, n := range v {
			if ok[n] {
				out[n]++
			}
		}
	}
	return out
}

// planTopUps adds replicas to the shards with fewer than replication,
// lowest shard id first, each on the eligible node holding the fewest
// replicas that lacks the shard (ties to the lowest id), applying each to
// voters. A shard on one replica is topped up only if it can reach three
// (or the replication, if that is 2): two voters need each other, so a
// group stopped at two would stall on the loss of either, where one
// stalled only on its own.
func planTopUps(voters [][]string, nodes []string, ok map[string]bool, replication int) []PlannedMove {
	count := replicaCounts(voters, ok)
	var out []PlannedMove
	for id, v := range voters {
		if len(v) == 1 && replication >= 3 {
			free := 0
			for _, n := range nodes {
				if n != v[0] {
					free++
				}
			}
			if free < 2 {
				continue
			}
		}
		for len(v) < replication {
			to := ""
			for _, n := range nodes {
				if !slices.Contains(v, n) && (to == "" || count[n] < count[to]) {
					to = n
				}
			}
			if to == "" {
				break // every eligible node holds it already
			}
			v = append(v, to)
			count[to]++
			out = append(out, PlannedMove{Shard: uint32(id), To: to})
		}
		voters[id] = v
	}
	return out
}

// planMoves balances the replica counts, applying each move to voters.
func planMoves(voters [][]string, nodes []string, ok map[string]bool) []PlannedMove {
	count := replicaCounts(voters, ok)
	total := 0
	for _, n := range nodes {
		total += count[n]
	}
	q, r := total/len(nodes), total%len(nodes)
	// The r nodes holding the most get q+1 (ties to the lowest id), so as
	// few replicas as possible leave their node.
	byLoad := slices.Clone(nodes)
	slices.SortStableFunc(byLoad, func(a, b string) int { return cmp.Compare(count[b], count[a]) })
	target := map[string]int{}
	for i, n := range byLoad {
		target[n] = q
		if i < r {
			target[n] = q + 1
		}
	}
	var moves []PlannedMove
	for {
		// The largest surplus gives to the largest deficit; ties to the
		// lowest id. Each move shrinks both by one.
		from, to := "", ""
		for _, n := range nodes {
			if s := count[n] - target[n]; s > 0 && (from == "" || s > count[from]-target[from]) {
				from = n
			}
			if d := target[n] - count[n]; d > 0 && (to == "" || d > target[to]-count[to]) {
				to = n
			}
		}
		if from == "" || to == "" {
			return moves
		}
		shard, found := pickShard(voters, from, to)
		if !found {
			return moves // cannot happen: from holds more than to
		}
		voters[shard] = append(slices.DeleteFunc(voters[shard], func(n string) bool { return n == from }), to)
		count[from]--
		count[to]++
		moves = append(moves, PlannedMove{Shard: shard, From: from, To: to})
	}
}

// pickShard picks the shard to move from one node to another: one to
// lacks, preferably one from is not the preferred leader of (moving it
// leaves leadership where it is), lowest id first.
func pickShard(voters [][]string, from, to string) (uint32, bool) {
	best, found, bestLeads := uint32(0), false, false
	for id, v := range voters {
		if !slices.Contains(v, from) || slices.Contains(v, to) {
			continue
		}
		leads := v[0] == from
		if !found || (bestLeads && !leads) {
			best, found, bestLeads = uint32(id), true, leads
		}
	}
	return best, found
}

// preferredCounts counts the shards each eligible node is the preferred
// leader of.
func preferredCounts(count uint32, voters [][]string, ok map[string]bool) map[string]int {
	out := map[string]int{}
	for id := uint32(0); id < count; id++ {
		if v := voters[id]; len(v) > 0 && ok[v[0]] {
			out[v[0]]++
		}
	}
	return out
}

// planLeaders balances the preferred leaders over voters (the map after
// the moves) and reorders voters to match.
func planLeaders(count uint32, voters [][]string, nodes []string, ok map[string]bool) []LeaderChange {
	pref := make([]string, count) // "" for a shard no eligible node can lead
	orig := make([]string, count)
	led := map[string]int{}
	var shards []uint32 // shards with an eligible voter
	for id := uint32(0); id < count; id++ {
		if len(voters[id]) > 0 {
			orig[id] = voters[id][0]
		}
		if !slices.ContainsFunc(voters[id], func(n string) bool { return ok[n] }) {
			continue
		}
		shards = append(shards, id)
		if ok[orig[id]] {
			pref[id] = orig[id]
			led[orig[id]]++
		}
	}
	// A shard whose preferred node is ineligible goes to its eligible
	// voter preferring the fewest.
	for _, id := range shards {
		if pref[id] != "" {
			continue
		}
		for _, n := range voters[id] {
			if ok[n] && (pref[id] == "" || led[n] < led[pref[id]]) {
				pref[id] = n
			}
		}
		led[pref[id]]++
	}
	if len(shards) > 0 {
		q, r := len(shards)/len(nodes), len(shards)%len(nodes)
		hi := q
		if r > 0 {
			hi = q + 1
		}
		// Above the ceiling, shed to anyone below it; then below the floor,
		// take from anyone above it.
		for shiftLeaders(pref, voters, nodes, ok, led, func(n string) bool { return led[n] > hi }, func(n string) bool { return led[n] < hi }) {
		}
		for shiftLeaders(pref, voters, nodes, ok, led, func(n string) bool { return led[n] > q }, func(n string) bool { return led[n] < q }) {
		}
	}
	var out []LeaderChange
	for _, id := range shards {
		if pref[id] == orig[id] {
			continue
		}
		out = append(out, LeaderChange{Shard: id, From: orig[id], To: pref[id]})
		i := slices.Index(voters[id], pref[id])
		voters[id] = append([]string{pref[id]}, slices.Delete(voters[id], i, i+1)...)
	}
	return out
}

// shiftLeaders finds the shortest chain of preference changes from a node
// that is over to one that is under (breadth first over "a shard n prefers
// has eligible voter m"), applies it and reports whether it found one.
// Each chain lowers the first node by one and raises the last by one.
func shiftLeaders(pref []string, voters [][]string, nodes []string, ok map[string]bool, led map[string]int, over, under func(string) bool) bool {
	for _, src := range nodes {
		if !over(src) {
			continue
		}
		type hop struct {
			prev  string
			shard uint32
		}
		seen := map[string]hop{src: {}}
		queue := []string{src}
		for len(queue) > 0 {
			cur := queue[0]
			queue = queue[1:]
			for id, p := range pref {
				if p != cur {
					continue
				}
				for _, next := range voters[id] {
					if _, done := seen[next]; done || !ok[next] {
						continue
					}
					seen[next] = hop{prev: cur, shard: uint32(id)}
					if under(next) {
						for n := next; n != src; n = seen[n].prev {
							pref[seen[n].shard] = n
						}
						led[src]--
						led[next]++
						return true
					}
					queue = append(queue, next)
				}
			}
		}
	}
	return false
}
