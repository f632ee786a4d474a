package cluster

import "github.com/raftq/raftq/wire"

// tableAt is a slot table and the meta index it was read at.
type tableAt struct {
	index uint64
	table wire.SlotTable
}

// SlotTable is the slot table of the current shard map (meta.ShardMap.Table):
// where keyed messages go. It follows slot moves as the local meta replica
// applies them. Zero while no map is placed.
//
// Reading the map copies it whole, too much for every send; the table is
// read again only when the meta replica has applied something since, as
// the map changes only by applied commands.
func (n *Node) SlotTable() wire.SlotTable {
	index := n.meta.AppliedIndex()
	if c := n.shards.table.Load(); c != nil && c.index == index {
		return c.table
	}
	// Read after the index: the map is at least as new as index says, so
	// caching it under index is never stale.
	m := n.meta.ShardMap()
	var t wire.SlotTable
	if m.Placed() {
		t = m.Table()
	}
	n.shards.table.Store(&tableAt{index: index, table: t})
	return t
}
