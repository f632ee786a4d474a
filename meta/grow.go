package meta

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/raftq/raftq/meta/metapb"
)

// Growing the shard count adds shard groups to the map; it moves nothing.
// The new shards own no slot until slot moves (meta/slotmoves.go) hand
// them some, so every key routes where it did the moment before. Each new
// shard is placed like a first placement: its replicas bootstrap the group
// from the map (Changes 0). The first growth also records the slot count
// and every slot's owner in the bootstrap layout, the layout that slot
// moves then edit.
//
// Growth is allowed while replica moves or slot moves run: a replica move
// changes one shard's replica set, never a new shard's, and a slot move's
// slots keep their owners (the table is explicit by then, or it is made
// explicit here in the layout the move was checked against).

// GrowShards raises the shard count to count: replicas lists the replica
// node ids of every new shard (ids from the current count to count-1, the
// first the preferred leader; see PlanGrowth), addrs the raft address of
// each node they name that the map does not know. Growing to the count
// the map records with the same replicas succeeds and changes nothing;
// a smaller count is refused with ErrRefused (the count only grows).
func (s *Store) GrowShards(ctx context.Context, count uint32, replicas map[uint32][]string, addrs map[string]string) error {
	if _, err := s.apply(ctx, &metapb.Command{Cmd: &metapb.Command_GrowShards{GrowShards: growCommand(count, replicas, addrs)}}); err != nil {
		return fmt.Errorf("grow to %d shards: %w", count, err)
	}
	return nil
}

// growCommand lists the shards of replicas in id order, and the addresses
// of the nodes they name that addrs knows.
func growCommand(count uint32, replicas map[uint32][]string, addrs map[string]string) *metapb.GrowShards {
	c := &metapb.GrowShards{Count: count}
	used := map[string]bool{}
	for _, id := range slices.Sorted(maps.Keys(replicas)) {
		c.Shards = append(c.Shards, &metapb.ShardReplicas{Shard: id, Nodes: slices.Clone(replicas[id])})
		for _, n := range replicas[id] {
			used[n] = true
		}
	}
	for _, n := range slices.Sorted(maps.Keys(used)) {
		if a, ok := addrs[n]; ok {
			c.Nodes = append(c.Nodes, &metapb.NodeAddr{NodeId: n, RaftAddr: a})
		}
	}
	return c
}

func (f *FSM) growShards(c *metapb.GrowShards) *metapb.Result {
	if f.shardMap == nil {
		return refusal("no shard map is placed")
	}
	cur, count := f.shardMap.GetCount(), c.GetCount()
	switch {
	case count < cur:
		return refusal("the shard count only grows; shrinking is not supported (the cluster has %d shards, not %d)", cur, count)
	case count == cur:
		if f.grownTo(c) {
			return &metapb.Result{} // applied already: a retried growth
		}
		return refusal("the cluster has %d shards already", cur)
	case count > f.slotCount():
		return invalid("the cluster has %d hash slots, so at most %d shards", f.slotCount(), f.slotCount())
	case len(c.GetShards()) != int(count-cur):
		return invalid("growing from %d to %d shards must place each of the %d new shards once", cur, count, count-cur)
	}
	addrs := map[string]bool{}
	for _, n := range f.shardMap.GetNodes() {
		addrs[n.GetNodeId()] = n.GetRaftAddr() != ""
	}
	for _, n := range c.GetNodes() {
		if n.GetNodeId() == "" || n.GetRaftAddr() == "" {
			return invalid("a node address needs a node id and a raft address")
		}
		addrs[n.GetNodeId()] = true
	}
	seen := map[uint32]bool{}
	for _, sr := range c.GetShards() {
		id, nodes := sr.GetShard(), sr.GetNodes()
		uniq := slices.Compact(slices.Sorted(slices.Values(nodes)))
		switch {
		case id < cur || id >= count || seen[id]:
			return invalid("growing from %d to %d shards places shards %d to %d once each, not shard %d", cur, count, cur, count-1, id)
		case len(nodes) == 0 || len(uniq) != len(nodes) || slices.Contains(nodes, ""):
			return invalid("shard %d needs replicas on distinct nodes", id)
		case len(sr.GetLearners()) > 0 || sr.GetChanges() != 0:
			return invalid("new shard %d starts with voters only and no changes", id)
		}
		seen[id] = true
		for _, n := range nodes {
			if slices.Contains(f.shardMap.GetRetired(), n) {
				return refusal("node %s is retired", n)
			}
			if !addrs[n] {
				return invalid("no raft address for node %s, a replica of new shard %d", n, id)
			}
		}
	}
	// Explicit owners before the count changes: the bootstrap layout is
	// defined by the bootstrap count, which is about to stop being the
	// shard count.
	f.materializeSlots()
	for _, sr := range c.GetShards() {
		f.shardMap.Shards = append(f.shardMap.Shards, &metapb.ShardReplicas{Shard: sr.GetShard(), Nodes: slices.Clone(sr.GetNodes())})
	}
	slices.SortFunc(f.shardMap.Shards, func(a, b *metapb.ShardReplicas) int { return int(a.GetShard()) - int(b.GetShard()) })
	for _, n := range c.GetNodes() {
		f.setAddr(n.GetNodeId(), n.GetRaftAddr())
	}
	f.shardMap.Count = count
	f.shardMap.Version++
	return &metapb.Result{}
}

// grownTo reports whether the map records growth c already: every shard
// it places has those voters, in any order (the rebalancer may have
// preferred another leader since). After a replica move of a new shard a
// retry is refused, as it no longer describes the map.
func (f *FSM) grownTo(c *metapb.GrowShards) bool {
	if len(c.GetShards()) == 0 {
		return true
	}
	for _, sr := range c.GetShards() {
		i := slices.IndexFunc(f.shardMap.GetShards(), func(r *metapb.ShardReplicas) bool { return r.GetShard() == sr.GetShard() })
		if i < 0 {
			return false
		}
		have := f.shardMap.GetShards()[i]
		if !slices.Equal(slices.Sorted(slices.Values(have.GetNodes())), slices.Sorted(slices.Values(sr.GetNodes()))) {
			return false
		}
	}
	return true
}
