package wire

import (
	"fmt"
	"testing"
)

// The bootstrap slot layout must place every key where the plain hash did,
// or a cluster that predates slots would lose its groups' order and its
// dedup keys on upgrade.
func TestDefaultSlotTablePlacesAsThePlainHash(t *testing.T) {
	for _, n := range []uint32{1, 2, 3, 5, 7, 16} {
		tab := DefaultSlotTable(n)
		if !tab.Valid() {
			t.Fatalf("n=%d: default table invalid: %+v", n, tab)
		}
		for i := range 2000 {
			q := fmt.Sprintf("q%d", i%7)
			group, key := fmt.Sprintf("g%d", i), ""
			if i%3 == 0 {
				group, key = "", fmt.Sprintf("k%d", i)
			}
			want, _ := ShardForMessage(q, group, key, n)
			got, ok := tab.ShardForMessage(q, group, key)
			if !ok || got != want {
				t.Fatalf("n=%d %s/%q/%q: table shard %d (ok %v), plain hash %d", n, q, group, key, got, ok, want)
			}
		}
	}
}

func TestSlotTableOwnersMoveWholeSlots(t *testing.T) {
	tab := DefaultSlotTable(1)
	owners := make([]uint32, tab.Slots)
	for s := range owners {
		owners[s] = uint32(s) % 3
	}
	grown := SlotTable{Slots: tab.Slots, Owners: owners}
	if !grown.Valid() {
		t.Fatal("explicit table invalid")
	}
	seen := map[uint32]int{}
	for i := range 3000 {
		slot, _ := SlotForMessage("q", fmt.Sprint(i), "", grown.Slots)
		shard, _ := grown.ShardForMessage("q", fmt.Sprint(i), "")
		if shard != slot%3 {
			t.Fatalf("group %d: slot %d on shard %d, owner table says %d", i, slot, shard, slot%3)
		}
		seen[shard]++
	}
	if len(seen) != 3 {
		t.Fatalf("3000 groups over 3 shards landed on %v", seen)
	}
	if _, ok := grown.ShardForMessage("q", "", ""); ok {
		t.Fatal("a message with neither group nor key has a fixed shard")
	}
	if (SlotTable{Slots: 100}).Valid() || (SlotTable{Slots: 256, Owners: []uint32{0}}).Valid() {
		t.Fatal("malformed tables pass Valid")
	}
}
