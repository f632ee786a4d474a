package client

import (
	"slices"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
)

// shardMap is an immutable snapshot of where shards are led. The client swaps
// whole snapshots (copy on write) so readers never lock.
type shardMap struct {
	count   uint32
	version uint64
	leaders []string // shard id -> leader gRPC address; "" when unknown
	nodes   []string // every known node address, for round robin
}

// newShardMap builds a snapshot from a ShardMap answer. Seeds stay in the
// node list so a cluster whose leaders are all unknown is still reachable.
func newShardMap(resp *raftqv1.ShardMapResponse, seeds []string) *shardMap {
	m := &shardMap{count: resp.GetShardCount(), version: resp.GetVersion()}
	m.leaders = make([]string, m.count)
	for _, s := range resp.GetShards() {
		if s.GetShardId() < m.count {
			m.leaders[s.GetShardId()] = s.GetLeaderGrpcAddr()
		}
	}
	m.nodes = nodeList(m.leaders, seeds)
	return m
}

func nodeList(leaders, seeds []string) []string {
	nodes := make([]string, 0, len(leaders)+len(seeds))
	for _, a := range leaders {
		if a != "" && !slices.Contains(nodes, a) {
			nodes = append(nodes, a)
		}
	}
	for _, a := range seeds {
		if !slices.Contains(nodes, a) {
			nodes = append(nodes, a)
		}
	}
	return nodes
}

// withLeader returns a copy of m with shard's leader replaced by addr.
func (m *shardMap) withLeader(shard int, addr string, seeds []string) *shardMap {
	if shard < 0 || shard >= len(m.leaders) || m.leaders[shard] == addr {
		return m
	}
	n := &shardMap{count: m.count, version: m.version, leaders: slices.Clone(m.leaders)}
	n.leaders[shard] = addr
	n.nodes = nodeList(n.leaders, seeds)
	return n
}

// leader returns the known leader of shard, or "".
func (m *shardMap) leader(shard int) string {
	if shard < 0 || shard >= len(m.leaders) {
		return ""
	}
	return m.leaders[shard]
}
