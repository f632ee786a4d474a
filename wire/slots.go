package wire

import "hash/fnv"

// SlotsPerShard is how many hash slots a cluster has per shard it was
// bootstrapped with. Keyed messages (grouped, or ungrouped with a dedup
// key) are placed on a slot, and each slot is owned by one shard; growing
// the shard count moves whole slots, so a cluster can grow to at most
// SlotsPerShard times its bootstrap shard count.
//
// The slot count is a multiple of the bootstrap shard count n, and the
// first layout gives slot s to shard s % n: hash % (n*256) % n equals
// hash % n, so the slot layout places every key where the plain hash
// placement (ShardFor) did, and a cluster that predates slots routes
// exactly as before.
const SlotsPerShard = 256

// SlotTable maps slots to shards. The zero value is not usable; see
// DefaultSlotTable.
type SlotTable struct {
	// Slots is the slot count, fixed for the life of the cluster.
	Slots uint32
	// Owners[s] is the shard that owns slot s; nil means the bootstrap
	// layout, slot s on shard s % (Slots / SlotsPerShard).
	Owners []uint32
}

// DefaultSlotTable is the bootstrap layout of a cluster of n shards.
func DefaultSlotTable(n uint32) SlotTable { return SlotTable{Slots: n * SlotsPerShard} }

// Valid reports whether the table can place keys: a slot count that is a
// multiple of SlotsPerShard, and an owner for every slot when explicit.
func (t SlotTable) Valid() bool {
	return t.Slots > 0 && t.Slots%SlotsPerShard == 0 && (t.Owners == nil || len(t.Owners) == int(t.Slots))
}

// Owner is the shard that owns slot.
func (t SlotTable) Owner(slot uint32) uint32 {
	if t.Owners != nil {
		return t.Owners[slot]
	}
	return slot % (t.Slots / SlotsPerShard)
}

// ShardForMessage is ShardForMessage placed through the table.
func (t SlotTable) ShardForMessage(queue, group, dedupKey string) (shard uint32, ok bool) {
	slot, ok := SlotForMessage(queue, group, dedupKey, t.Slots)
	if !ok {
		return 0, false
	}
	return t.Owner(slot), true
}

// SlotForMessage is the slot of a keyed message: by its group when it has
// one (order), else by its dedup key (dedup state is per shard). ok is
// false for a message with neither, which any shard may take.
func SlotForMessage(queue, group, dedupKey string, slots uint32) (slot uint32, ok bool) {
	switch {
	case slots == 0:
		return 0, false
	case group != "":
		return uint32(routingHash(queue, group) % uint64(slots)), true
	case dedupKey != "":
		return uint32(routingHash(queue, dedupDomain+dedupKey) % uint64(slots)), true
	default:
		return 0, false
	}
}

// dedupDomain prefixes a dedup key so that keys and group ids hash in
// different domains.
const dedupDomain = "\x01dedup:"

// routingHash is FNV-1a of (queue, 0, key): stable across Go versions and
// platforms, as every client and server must agree on it.
func routingHash(queue, key string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(queue))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(key))
	return h.Sum64()
}
