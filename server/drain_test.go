package server

import (
	"testing"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/meta"
)

func TestLeavesTooFewVoters(t *testing.T) {
	three := map[string]raft.ServerSuffrage{"n1": raft.Voter, "n2": raft.Voter, "n3": raft.Voter}
	withNonvoter := map[string]raft.ServerSuffrage{"n1": raft.Voter, "n2": raft.Voter, "n3": raft.Voter, "n5": raft.Nonvoter}
	four := map[string]raft.ServerSuffrage{"n1": raft.Voter, "n2": raft.Voter, "n3": raft.Voter, "n4": raft.Voter}
	cases := []struct {
		name    string
		servers map[string]raft.ServerSuffrage
		id      string
		left    int
		short   bool
	}{
		{"a voter of three", three, "n2", 2, true},
		{"a voter of four", four, "n4", 3, false},
		{"a nonvoter", withNonvoter, "n5", 3, false},
		// Removed from the configuration, the shard map not yet applied:
		// the zero suffrage is Voter, which must not count.
		{"gone from the configuration", three, "n5", 3, false},
	}
	for _, tc := range cases {
		left, short := leavesTooFewVoters(tc.servers, tc.id)
		if left != tc.left || short != tc.short {
			t.Errorf("%s: leavesTooFewVoters = %d, %v; want %d, %v", tc.name, left, short, tc.left, tc.short)
		}
	}
}

// A spare for a drained replica is a live meta member that neither holds
// the shard nor is retired; a node only gossip knows does not count.
func TestHasSpare(t *testing.T) {
	sm := meta.ShardMap{Count: 1, Replicas: map[uint32][]string{0: {"n1", "n2", "n3"}}, Retired: []string{"n6"}, Drains: []meta.Drain{{Node: "n7"}}}
	servers := map[string]raft.ServerSuffrage{"n1": raft.Voter, "n2": raft.Voter, "n3": raft.Voter, "n4": raft.Nonvoter, "n6": raft.Nonvoter, "n7": raft.Nonvoter}
	for _, tc := range []struct {
		name  string
		alive map[string]bool
		want  bool
	}{
		{"a live nonvoter", map[string]bool{"n1": true, "n2": true, "n3": true, "n4": true}, true},
		{"the nonvoter down", map[string]bool{"n1": true, "n2": true, "n3": true, "n4": false}, false},
		{"only holders", map[string]bool{"n1": true, "n2": true, "n3": true}, false},
		{"outside meta", map[string]bool{"n1": true, "n2": true, "n3": true, "n5": true}, false},
		{"retired", map[string]bool{"n1": true, "n2": true, "n3": true, "n6": true}, false},
		{"being drained", map[string]bool{"n1": true, "n2": true, "n3": true, "n7": true}, false},
	} {
		if got := hasSpare(sm, servers, tc.alive, "n3", 0); got != tc.want {
			t.Errorf("%s: hasSpare = %v, want %v", tc.name, got, tc.want)
		}
	}
}
