package meta

import (
	"maps"
	"slices"

	"github.com/raftq/raftq/meta/metapb"
	"github.com/raftq/raftq/wire"
)

// ShardMap is the placement of the data shards. It is placed once, after
// bootstrap; Count only grows (GrowShards, meta/grow.go), a shard's
// replicas change only through replica moves (meta/moves.go), and slots
// change owner only through slot moves (meta/slotmoves.go).
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
	// Learners maps a shard id to the nodes joining it as nonvoters.
	Learners map[uint32][]string
	// Changes counts each shard's replica-set changes since placement: a
	// fresh replica bootstraps from Replicas only while it is 0.
	Changes map[uint32]uint64
	// Moves are the running replica moves, by shard; Retired the retired
	// node ids.
	Moves   []Move
	Retired []string
	Drains  []Drain
	// Slots and SlotOwners are the hash slot table as the proto records
	// it (metapb.ShardMap); read it through Table.
	Slots      uint32
	SlotOwners []uint32
	// SlotMoves are the recorded slot moves, running or done, by id;
	// NextSlotMoveID is the lowest id a new one may take (at least 1).
	SlotMoves      []SlotMove
	NextSlotMoveID uint64
}

// Table is the slot table that places keyed messages on shards. A map
// that records no slot count is still in its bootstrap layout, where the
// count is the shard count times wire.SlotsPerShard (the shard count
// cannot have grown without the count being recorded).
func (m ShardMap) Table() wire.SlotTable {
	slots := m.Slots
	if slots == 0 {
		slots = m.Count * wire.SlotsPerShard
	}
	return wire.SlotTable{Slots: slots, Owners: m.SlotOwners}
}

// Placed reports whether the map has been written.
func (m ShardMap) Placed() bool { return m.Version > 0 }

// Hosts reports whether node is a replica of shard, voter or learner.
func (m ShardMap) Hosts(shard uint32, node string) bool {
	return slices.Contains(m.Replicas[shard], node) || slices.Contains(m.Learners[shard], node)
}

// ShardsOf returns the shards node replicates, voter or learner, ascending.
func (m ShardMap) ShardsOf(node string) []uint32 {
	var out []uint32
	for id := uint32(0); id < m.Count; id++ {
		if m.Hosts(id, node) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// Clone returns a deep copy.
func (m ShardMap) Clone() ShardMap {
	out := ShardMap{Version: m.Version, Count: m.Count, RaftAddrs: maps.Clone(m.RaftAddrs), ClusterID: m.ClusterID,
		Changes: maps.Clone(m.Changes), Moves: slices.Clone(m.Moves), Retired: slices.Clone(m.Retired), Drains: slices.Clone(m.Drains),
		Slots: m.Slots, SlotOwners: slices.Clone(m.SlotOwners), NextSlotMoveID: m.NextSlotMoveID}
	for _, mv := range m.SlotMoves {
		mv.Slots = slices.Clone(mv.Slots)
		out.SlotMoves = append(out.SlotMoves, mv)
	}
	out.Replicas = cloneLists(m.Replicas)
	out.Learners = cloneLists(m.Learners)
	return out
}

func cloneLists(in map[uint32][]string) map[uint32][]string {
	if in == nil {
		return nil
	}
	out := make(map[uint32][]string, len(in))
	for id, nodes := range in {
		out[id] = slices.Clone(nodes)
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
		Learners:  map[uint32][]string{},
		Changes:   map[uint32]uint64{},
		Retired:   slices.Clone(p.GetRetired()),
		Slots:     p.GetSlots(),

		NextSlotMoveID: max(p.GetNextSlotMoveId(), 1),
	}
	if len(p.GetSlotOwners()) > 0 {
		m.SlotOwners = slices.Clone(p.GetSlotOwners())
	}
	for _, s := range p.GetShards() {
		m.Replicas[s.GetShard()] = slices.Clone(s.GetNodes())
		if len(s.GetLearners()) > 0 {
			m.Learners[s.GetShard()] = slices.Clone(s.GetLearners())
		}
		if s.GetChanges() > 0 {
			m.Changes[s.GetShard()] = s.GetChanges()
		}
	}
	for _, d := range p.GetDrains() {
		m.Drains = append(m.Drains, Drain{Node: d.GetNodeId(), To: d.GetTo()})
	}
	for _, mv := range p.GetMoves() {
		m.Moves = append(m.Moves, Move{Shard: mv.GetShard(), From: mv.GetFrom(), To: mv.GetTo(), Phase: mv.GetPhase(), Aborting: mv.GetAborting()})
	}
	for _, mv := range p.GetSlotMoves() {
		m.SlotMoves = append(m.SlotMoves, slotMoveFromProto(mv))
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
