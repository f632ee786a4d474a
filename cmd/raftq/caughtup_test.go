package main

import (
	"reflect"
	"testing"

	"github.com/raftq/raftq/client"
)

// lagging names each shard of the node that has not applied its leader's
// commit index, or whose leader's index is not known yet, and ignores
// shards the node does not replicate.
func TestLaggingNamesEachShardBehind(t *testing.T) {
	st := &client.ClusterStatus{NodeID: "n2", Shards: []client.ShardInfo{
		{ID: 0, Replicas: []string{"n1", "n2", "n3"}, LeaderID: "n1", AppliedIndex: 90},
		{ID: 1, Replicas: []string{"n1", "n2", "n3"}, LeaderID: "n3", AppliedIndex: 200},
		{ID: 2, Replicas: []string{"n1", "n2", "n3"}, LeaderID: "n3", AppliedIndex: 5},
		{ID: 3, Replicas: []string{"n1", "n3", "n4"}, LeaderID: "n1", AppliedIndex: 0},
	}}
	marks := map[uint32]uint64{0: 100, 1: 200, 3: 50}
	want := []string{
		"shard 0 applied 90 of the 100 committed on its leader n1",
		"shard 2: no commit index from its leader n3 yet",
	}
	if got := lagging("n2", st, marks); !reflect.DeepEqual(got, want) {
		t.Fatalf("lagging = %q, want %q", got, want)
	}
	marks[0], marks[2] = 90, 5
	if got := lagging("n2", st, marks); len(got) != 0 {
		t.Fatalf("caught-up node lagging %q", got)
	}
	// Another node answered: nothing is known of n2.
	if got := lagging("n5", st, marks); len(got) != 1 || got[0] != "n5 did not answer (n2 did)" {
		t.Fatalf("lagging of a node that did not answer = %q", got)
	}
}
