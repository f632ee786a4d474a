package meta

import (
	"maps"
	"slices"

	"github.com/raftq/raftq/meta/metapb"
)

// ShardMap is the placement of the data shards. It is written once, after
// bootstrap, and never changes: Count is fixed for the life of the cluster.
type ShardMap struct {
	// Version is 0 while no map is placed.
	Version uint64
	Count   uint32
	// Replicas maps a shard id to its replica node ids; the first is the
	// preferred leader.
	Replicas map[uint32][]string
	// RaftAddrs holds each replica node's raft address at placement time;
	// replicas bootstrap shard groups from it.
	RaftAddrs map[string]string
	// ClusterID names the cluster; chosen at random when the map is placed
	// (empty in maps placed before it existed).
	ClusterID string
}

// Placed reports whether the map has been written.
func (m ShardMap) Placed() bool { return m.Version > 0 }

// Hosts reports whether node is a replica of shard.
func (m ShardMap) Hosts(shard uint32, node string) bool {
	return slices.Contains(m.Replicas[shard], node)
}

// ShardsOf returns the shards node replicates, ascending.
func (m ShardMap) ShardsOf(node string) []uint32 {
	var out []uint32
	for id, nodes := range m.Replicas {
		if slices.Contains(nodes, node) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// Clone returns a deep copy.
func (m ShardMap) Clone() ShardMap {
	out := ShardMap{Version: m.Version, Count: m.Count, RaftAddrs: maps.Clone(m.RaftAddrs), ClusterID: m.ClusterID}
	if m.Replicas != nil {
		out.Replicas = make(map[uint32][]string, len(m.Replicas))
		for id, nodes := range m.Replicas {
			out.Replicas[id] = slices.Clone(nodes)
		}
	}
	return out
}

func shardMapFromProto(p *metapb.ShardMap) ShardMap {
	if p == nil {
		return ShardMap{}
	}
	m := ShardMap{
		Version:   p.GetVersion(),
		Count:     p.GetCount(),
		Replicas:  make(map[uint32][]string, len(p.GetShards())),
		RaftAddrs: make(map[string]string, len(p.GetNodes())),
		ClusterID: p.GetClusterId(),
	}
	for _, s := range p.GetShards() {
		m.Replicas[s.GetShard()] = slices.Clone(s.GetNodes())
	}
	for _, n := range p.GetNodes() {
		m.RaftAddrs[n.GetNodeId()] = n.GetRaftAddr()
	}
	return m
}

func placeCommand(count uint32, replicas map[uint32][]string, addrs map[string]string, clusterID string) *metapb.PlaceShards {
	c := &metapb.PlaceShards{Count: count, ClusterId: clusterID}
	used := map[string]bool{}
	for id := uint32(0); id < count; id++ {
		c.Shards = append(c.Shards, &metapb.ShardReplicas{Shard: id, Nodes: slices.Clone(replicas[id])})
		for _, n := range replicas[id] {
			used[n] = true
		}
	}
	for _, n := range slices.Sorted(maps.Keys(used)) {
		c.Nodes = append(c.Nodes, &metapb.NodeAddr{NodeId: n, RaftAddr: addrs[n]})
	}
	return c
}
