package cluster

import (
	"time"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/router"
	"github.com/raftq/raftq/wire"
)

// tableAt is a slot table, the slot moves whose dedup look-ups may still
// run (a map with only those) and the meta index they were read at.
type tableAt struct {
	index uint64
	table wire.SlotTable
	moves meta.ShardMap
}

// SlotTable is the slot table of the current shard map (meta.ShardMap.Table):
// where keyed messages go. It follows slot moves as the local meta replica
// applies them. Zero while no map is placed.
//
// Reading the map copies it whole, too much for every send; the table is
// read again only when the meta replica has applied something since, as
// the map changes only by applied commands.
func (n *Node) SlotTable() wire.SlotTable { return n.slotsAt().table }

// DedupPeers are the shards a keyed send of queue to slot asks for its
// dedup key first (router.Topology): those the slot left by a move routed
// less than the queue's dedup window ago, by this node's clock less
// meta.PriorSlack. A queue created after the move was routed (so after
// its seal) has no key on them.
func (n *Node) DedupPeers(queue string, slot uint32) []router.PriorOwner {
	c := n.slotsAt()
	if len(c.moves.SlotMoves) == 0 {
		return nil
	}
	now := time.Now().Add(-meta.PriorSlack).UnixMilli()
	peers := c.moves.DedupPeers(slot, now)
	if len(peers) == 0 {
		return nil
	}
	q, known := n.meta.Queue(queue)
	return priorsFor(peers, q, known, now)
}

// priorsFor keeps the prior owners that can hold a key of queue q at
// nowMs; an unknown queue (a replica behind) or a move without its route
// time keeps them all.
func priorsFor(peers []meta.PriorOwner, q meta.Queue, known bool, nowMs int64) []router.PriorOwner {
	var out []router.PriorOwner
	for _, p := range peers {
		if known && p.RoutedMs > 0 {
			window := fsm.NormalizePolicy(q.Policy).GetDedupWindowMs()
			if q.CreatedMs > p.RoutedMs+PriorSkew.Milliseconds() || nowMs > p.RoutedMs+window {
				continue
			}
		}
		out = append(out, router.PriorOwner{Shard: p.Shard, Move: p.Move})
	}
	return out
}

// PriorSkew is how far apart two meta leaders' clocks may be when one
// stamps a queue's creation and the other a move's route: twice the clock
// bound nodes hold to before they lead (docs/clock.md).
const PriorSkew = time.Second

func (n *Node) slotsAt() *tableAt {
	index := n.meta.AppliedIndex()
	if c := n.shards.table.Load(); c != nil && c.index == index {
		return c
	}
	// Read after the index: the map is at least as new as index says, so
	// caching it under index is never stale.
	m := n.meta.ShardMap()
	c := &tableAt{index: index}
	if m.Placed() {
		c.table = m.Table()
		c.moves = meta.ShardMap{Count: m.Count, Slots: m.Slots, SlotOwners: c.table.Owners, SlotMoves: m.SlotMoves}
	}
	n.shards.table.Store(c)
	return c
}
