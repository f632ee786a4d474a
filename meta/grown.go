package meta

import "slices"

// Grown is m as a growth to count shards with the new shards' replicas
// would leave it, slot table written out: what a dry run plans slot moves
// on. The FSM's own apply (grow.go) is what a real growth records.
func Grown(m ShardMap, count uint32, replicas map[uint32][]string) ShardMap {
	g := m.Clone()
	t := m.Table()
	g.Slots = t.Slots
	if g.SlotOwners == nil {
		g.SlotOwners = make([]uint32, t.Slots)
		for s := range t.Slots {
			g.SlotOwners[s] = t.Owner(s)
		}
	}
	g.Count = count
	if g.Replicas == nil {
		g.Replicas = map[uint32][]string{}
	}
	for id, nodes := range replicas {
		g.Replicas[id] = slices.Clone(nodes)
	}
	return g
}
