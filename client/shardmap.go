package client

import (
	"slices"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/wire"
)

// shardMap is an immutable snapshot of where shards are led. The client swaps
// whole snapshots (copy on write) so readers never lock.
type shardMap struct {
	count   uint32
	version uint64
	// table places keyed messages on shards, as the server that sent the
	// map does (zero Slots while count is 0). A table older than the
	// servers' costs a hop, not an error: a server places every message
	// by its own table, forwarding it when the client guessed wrong.
	table   wire.SlotTable
	leaders []string // shard id -> leader gRPC address; "" when unknown
	nodes   []string // every known node address, for round robin
}

// newShardMap builds a snapshot from a ShardMap answer. Seeds stay in the
// node list so a cluster whose leaders are all unknown is still reachable.
func newShardMap(resp *raftqv1.ShardMapResponse, seeds []string) *shardMap {
	m := &shardMap{count: resp.GetShardCount(), version: resp.GetVersion(), table: slotTable(resp)}
	m.leaders = make([]string, m.count)
	for _, s := range resp.GetShards() {
		if s.GetShardId() < m.count {
			m.leaders[s.GetShardId()] = s.GetLeaderGrpcAddr()
		}
	}
	m.nodes = nodeList(m.leaders, seeds)
	return m
}

// slotTable is the slot table of a ShardMap answer. A server that predates
// slots sends none: its cluster is in the bootstrap layout. A table that
// does not fit the shard count is ignored for the bootstrap layout too:
// misrouting costs only a hop, and a bad owner must not index past the
// leaders.
func slotTable(resp *raftqv1.ShardMapResponse) wire.SlotTable {
	n := resp.GetShardCount()
	t := wire.SlotTable{Slots: resp.GetSlots(), Owners: resp.GetSlotOwners()}
	if len(t.Owners) == 0 {
		t.Owners = nil
	}
	if t.Slots == 0 && t.Owners == nil {
		return wire.DefaultSlotTable(n)
	}
	if !t.Valid() || (t.Owners == nil && t.Slots != n*wire.SlotsPerShard) {
		// Without owners the layout is the bootstrap one, whose slot
		// count is the shard count's; a grown cluster lists its owners.
		return wire.DefaultSlotTable(n)
	}
	for _, o := range t.Owners {
		if o >= n {
			return wire.DefaultSlotTable(n)
		}
	}
	return t
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
	n := &shardMap{count: m.count, version: m.version, table: m.table, leaders: slices.Clone(m.leaders)}
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
