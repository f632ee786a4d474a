package meta

import (
	"slices"
	"testing"

	"github.com/raftq/raftq/meta/metapb"
)

func preferCmd(shard uint32, node string) *metapb.Command {
	return &metapb.Command{Cmd: &metapb.Command_PreferLeader{PreferLeader: &metapb.PreferLeader{Shard: shard, NodeId: node}}}
}

// PreferLeader puts a voter first in its shard's replicas and nothing
// else: the set and its change count stay (a fresh replica's bootstrap
// depends on them), a retry changes nothing, the order survives a
// snapshot, and a node that is not a voter of the shard is refused.
func TestFSM_PreferLeaderReordersTheReplicas(t *testing.T) {
	f := NewFSM(nil)
	idx := uint64(1)
	apply := func(cmd *metapb.Command) *metapb.Result {
		idx++
		return applyAt(t, f, idx, 0, cmd)
	}
	if r := apply(placeCmd(2, []string{"n1", "n2", "n3"})); r.GetCode() != metapb.Code_CODE_OK {
		t.Fatal(r)
	}
	before := shardMapFromProto(f.ShardMap())
	last := before.Replicas[1][2]
	if r := apply(preferCmd(1, last)); r.GetCode() != metapb.Code_CODE_OK {
		t.Fatalf("prefer %s: %v", last, r)
	}
	m := shardMapFromProto(f.ShardMap())
	want := append([]string{last}, before.Replicas[1][:2]...)
	if !slices.Equal(m.Replicas[1], want) || m.Changes[1] != 0 || m.Version != before.Version+1 || !slices.Equal(m.Replicas[0], before.Replicas[0]) {
		t.Fatalf("after prefer: replicas %v changes %d version %d, want %v, 0, %d", m.Replicas, m.Changes[1], m.Version, want, before.Version+1)
	}
	if r := apply(preferCmd(1, last)); r.GetCode() != metapb.Code_CODE_OK || shardMapFromProto(f.ShardMap()).Version != m.Version {
		t.Fatalf("retry: %v, version moved", r)
	}
	for _, tc := range []struct {
		cmd  *metapb.Command
		code metapb.Code
	}{
		{preferCmd(1, "n9"), metapb.Code_CODE_REFUSED},
		{preferCmd(7, "n1"), metapb.Code_CODE_INVALID},
		{preferCmd(1, ""), metapb.Code_CODE_INVALID},
	} {
		if r := apply(tc.cmd); r.GetCode() != tc.code {
			t.Errorf("%v: %v, want %v", tc.cmd, r, tc.code)
		}
	}
	g := restoredCopy(t, f)
	if got := shardMapFromProto(g.ShardMap()).Replicas[1]; !slices.Equal(got, want) {
		t.Fatalf("restored replicas %v, want %v", got, want)
	}
}

func TestFSM_PreferLeaderNeedsAMap(t *testing.T) {
	if r := applyAt(t, NewFSM(nil), 1, 0, preferCmd(0, "n1")); r.GetCode() != metapb.Code_CODE_REFUSED {
		t.Fatalf("%v, want refused", r)
	}
}
