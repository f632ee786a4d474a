package meta

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"
)

func nodeIDs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("node-%d", i+1)
	}
	return out
}

func TestPlace_Deterministic(t *testing.T) {
	tests := []struct {
		count       uint32
		replication int
		nodes       int
		wantPer     int
	}{
		{8, 3, 3, 3},
		{8, 3, 5, 3},
		{16, 3, 2, 2}, // replication capped at the node count
		{4, 1, 4, 1},
		{1, 5, 7, 5},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%d_shards_r%d_%d_nodes", tc.count, tc.replication, tc.nodes), func(t *testing.T) {
			nodes := nodeIDs(tc.nodes)
			a := Place(tc.count, tc.replication, nodes)
			shuffled := slices.Clone(nodes)
			slices.Reverse(shuffled)
			shuffled = append(shuffled, nodes[0]) // duplicates do not count twice
			b := Place(tc.count, tc.replication, shuffled)
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("same nodes in another order gave another map:\n%v\n%v", a, b)
			}
			if len(a) != int(tc.count) {
				t.Fatalf("%d shards placed, want %d", len(a), tc.count)
			}
			for id, reps := range a {
				if len(reps) != tc.wantPer {
					t.Fatalf("shard %d: %d replicas, want %d", id, len(reps), tc.wantPer)
				}
				if u := slices.Compact(slices.Sorted(slices.Values(reps))); len(u) != len(reps) {
					t.Fatalf("shard %d: duplicate replica in %v", id, reps)
				}
			}
		})
	}
}

func TestPlace_Balance(t *testing.T) {
	const count, rf, n = 240, 3, 5
	m := Place(count, rf, nodeIDs(n))
	replicas, leaders := map[string]int{}, map[string]int{}
	for _, reps := range m {
		leaders[reps[0]]++
		for _, r := range reps {
			replicas[r]++
		}
	}
	mean := float64(count*rf) / n
	for node, c := range replicas {
		if float64(c) < 0.8*mean || float64(c) > 1.2*mean {
			t.Errorf("%s holds %d replicas, mean %.0f: %v", node, c, mean, replicas)
		}
	}
	leadMean := float64(count) / n
	for node, c := range leaders {
		if float64(c) < 0.6*leadMean || float64(c) > 1.4*leadMean {
			t.Errorf("%s preferred leader of %d shards, mean %.0f: %v", node, c, leadMean, leaders)
		}
	}
	if len(leaders) != n {
		t.Errorf("only %d of %d nodes are a preferred leader: %v", len(leaders), n, slices.Sorted(maps.Keys(leaders)))
	}
}

func TestPlace_AddingANodeMovesOnlyWhatItWins(t *testing.T) {
	before := Place(64, 3, nodeIDs(5))
	after := Place(64, 3, nodeIDs(6))
	moved := 0
	for id := range uint32(64) {
		if slices.Contains(after[id], "node-6") {
			moved++
			continue
		}
		if !reflect.DeepEqual(before[id], after[id]) {
			t.Fatalf("shard %d changed without node-6: %v -> %v", id, before[id], after[id])
		}
	}
	if moved == 0 || moved == 64 {
		t.Fatalf("node-6 won %d of 64 shards; rendezvous should give it a share", moved)
	}
}
