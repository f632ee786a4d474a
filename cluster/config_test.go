package cluster

import "testing"

func TestShardCountDefaultsToOnePerReplicaSetOfVoters(t *testing.T) {
	base := Config{NodeID: "n1", DataDir: t.TempDir(), RaftBind: "127.0.0.1:0", GossipBind: "127.0.0.1:0"}
	for _, c := range []struct {
		expect, replication int
		shards, want        uint32
	}{
		{3, 3, 0, 1},
		{5, 3, 0, 2}, // rounded up: every node holds a replica
		{6, 3, 0, 2},
		{9, 3, 0, 3},
		{1, 1, 0, 1},
		{3, 1, 0, 3},
		{0, 3, 0, 1}, // a joiner: never places the map, but stays sane
		{3, 3, 8, 8}, // explicit wins
	} {
		cfg := base
		cfg.BootstrapExpect, cfg.Replication, cfg.Shards = c.expect, c.replication, c.shards
		got, err := cfg.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		if got.Shards != c.want {
			t.Fatalf("expect %d, replication %d, shards %d: default %d, want %d", c.expect, c.replication, c.shards, got.Shards, c.want)
		}
	}
}
