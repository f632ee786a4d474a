package cluster

import (
	"fmt"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/meta/metapb"
)

func candidate(id string, expect uint32, hasState bool) member {
	return member{
		Member: Member{NodeID: id, RaftAddr: id + ":7000", State: "alive"},
		meta:   &metapb.NodeMeta{NodeId: id, RaftAddr: id + ":7000", BootstrapExpect: expect, HasState: hasState},
	}
}

func TestBootstrapCandidates(t *testing.T) {
	tests := []struct {
		name          string
		expect        int
		sameFormation bool
		alive         []member
		want          bootstrapVerdict
		servers       string
	}{
		{"exactly expect, any order", 3, false, []member{candidate("c", 3, false), candidate("a", 3, false), candidate("b", 3, false)}, bootstrapNow, "[a b c]"},
		{"joiners never count", 3, false, []member{candidate("a", 3, false), candidate("b", 3, false), candidate("j", 0, false)}, tooFew, "[a b]"},
		{"mismatched expect never counts", 3, false, []member{candidate("a", 3, false), candidate("b", 3, false), candidate("x", 5, false)}, tooFew, "[a b]"},
		{"more than expect refuses", 3, false, []member{candidate("a", 3, false), candidate("b", 3, false), candidate("c", 3, false), candidate("d", 3, false)}, tooMany, "[a b c d]"},
		{"a member with state means join", 3, false, []member{candidate("a", 3, false), candidate("b", 3, false), candidate("c", 0, true)}, joinExisting, "[]"},
		{"expect 1 alone", 1, false, []member{candidate("a", 1, false)}, bootstrapNow, "[a]"},
		// An initial voter that bootstrapped first (it has state now) is
		// still one of this formation's voters for the others.
		{"same formation: a voter that bootstrapped first still counts", 3, true, []member{candidate("a", 3, false), candidate("b", 3, true), candidate("c", 3, false)}, bootstrapNow, "[a b c]"},
		{"same formation: a member with state and another expect means join", 3, true, []member{candidate("a", 3, false), candidate("b", 3, false), candidate("c", 0, true)}, joinExisting, "[]"},
		{"not the same formation: a voter with state means join", 3, false, []member{candidate("a", 3, false), candidate("b", 3, true), candidate("c", 3, false)}, joinExisting, "[]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			servers, verdict, _ := bootstrapCandidates(tc.alive, tc.expect, tc.sameFormation, "")
			if verdict != tc.want {
				t.Fatalf("verdict %v, want %v", verdict, tc.want)
			}
			var ids []raft.ServerID
			for _, s := range servers {
				if s.Suffrage != raft.Voter || string(s.Address) != string(s.ID)+":7000" {
					t.Fatalf("server %+v", s)
				}
				ids = append(ids, s.ID)
			}
			if got := fmt.Sprint(ids); got != tc.servers && !(tc.servers == "[]" && len(ids) == 0) {
				t.Fatalf("servers %s, want %s", got, tc.servers)
			}
		})
	}
}
