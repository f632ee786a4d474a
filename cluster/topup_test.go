package cluster

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// A cluster bootstrapped on two nodes places its shards on two replicas;
// when a third node joins, every shard is topped up to --replication
// (rebalancing off: top-ups do not wait for it): the map lists three
// replicas, each group has three voters, the new replicas hold what was
// acknowledged before, and the shards then ride out the loss of one of
// the first two nodes.
func TestShortShardsToppedUp(t *testing.T) {
	tc := newTestCluster(t)
	tc.form(2, nil, "n1", "n2") // Replication 3, placed on the two voters
	for id := range uint32(2) {
		if reps := tc.nodes["n1"].ShardReplicas(id); len(reps) != 2 {
			t.Fatalf("shard %d placed on %v; want two replicas", id, reps)
		}
	}
	ids := tc.enqueue(t, "before", 20)

	tc.define("n3", 0, "n1")
	tc.start("n3")
	want := []string{"n1", "n2", "n3"}
	waitFor(t, 90*time.Second, "every shard on three voters", func() error {
		n := tc.nodes["n1"]
		m := n.ShardMap()
		if len(m.Moves) > 0 {
			return fmt.Errorf("moves running: %v", m.Moves)
		}
		for id := range m.Count {
			if got := slices.Sorted(slices.Values(m.Replicas[id])); !slices.Equal(got, want) {
				return fmt.Errorf("shard %d on %v in the map", id, got)
			}
			leaders, err := tc.shardLeaders()
			if err != nil {
				return err
			}
			r := tc.nodes[leaders[id]].LocalShard(id).Raft()
			for _, node := range want {
				if s, ok := groupSuffrage(r, node); !ok || s != raft.Voter {
					return fmt.Errorf("shard %d: %s is not a voter of the group", id, node)
				}
			}
		}
		return tc.shardDigestsMatch(n)
	})
	if lost := missing(tc.nodes["n3"], ids); len(lost) > 0 {
		t.Fatalf("n3's new replica of shard 0 lacks %v", lost)
	}

	// n3 votes: with n2 gone, n1 and n3 still make a quorum of each group.
	tc.stop("n2")
	more := tc.enqueue(t, "after", 5)
	waitFor(t, 30*time.Second, "n1 and n3 hold every message", func() error {
		for _, id := range []string{"n1", "n3"} {
			if lost := missing(tc.nodes[id], append(slices.Clone(ids), more...)); len(lost) > 0 {
				return fmt.Errorf("%s lacks %v", id, lost)
			}
		}
		if _, err := tc.shardLeaders(); err != nil {
			return errors.Join(errors.New("a shard without a leader after n2 stopped"), err)
		}
		return nil
	})
}
