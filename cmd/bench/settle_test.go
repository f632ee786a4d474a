package main

import (
	"testing"

	"github.com/raftq/raftq/client"
)

func TestSettled(t *testing.T) {
	members := func(dead ...string) []client.Member {
		out := []client.Member{{NodeID: "n1", State: "alive"}, {NodeID: "n2", State: "alive"}, {NodeID: "n3", State: "alive"}}
		for i := range out {
			for _, d := range dead {
				if out[i].NodeID == d {
					out[i].State = "dead"
				}
			}
		}
		return out
	}
	shard := func(id uint32, leader string, replicas ...string) client.ShardInfo {
		return client.ShardInfo{ID: id, LeaderID: leader, Replicas: replicas}
	}
	for _, tc := range []struct {
		name    string
		st      client.ClusterStatus
		leaders string
		settled bool
	}{
		{"every shard on its preferred replica", client.ClusterStatus{Members: members(), Shards: []client.ShardInfo{
			shard(1, "n2", "n2", "n3", "n1"), shard(0, "n1", "n1", "n2", "n3")}}, "0=n1 1=n2", true},
		{"one shard still on another replica", client.ClusterStatus{Members: members(), Shards: []client.ShardInfo{
			shard(0, "n1", "n1", "n2", "n3"), shard(1, "n1", "n2", "n3", "n1")}}, "0=n1 1=n1", false},
		{"preferred replica dead: any leader will do", client.ClusterStatus{Members: members("n2"), Shards: []client.ShardInfo{
			shard(0, "n1", "n1", "n2", "n3"), shard(1, "n3", "n2", "n3", "n1")}}, "0=n1 1=n3", true},
		{"a shard without a leader", client.ClusterStatus{Members: members(), Shards: []client.ShardInfo{
			shard(0, "", "n1", "n2", "n3")}}, "0=-", false},
		{"no shards known yet", client.ClusterStatus{Members: members()}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := settled(&tc.st)
			if p.Leaders != tc.leaders || p.Settled != tc.settled {
				t.Fatalf("got %+v, want leaders %q settled %v", p, tc.leaders, tc.settled)
			}
		})
	}
}
