package server

import (
	"testing"

	"github.com/hashicorp/raft"
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
