package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/raftq/raftq/wire"
)

// A placed cluster routes keyed messages by the bootstrap layout of its
// shard count, and the cached table follows meta as it applies more.
func TestCluster_SlotTableIsTheMapsTable(t *testing.T) {
	tc := newTestCluster(t)
	n := tc.start(tc.define("one", 1).NodeID)
	tc.waitReady(20 * time.Second)
	check := func(when string) {
		t.Helper()
		got, want := n.SlotTable(), n.ShardMap().Table()
		if got.Slots != 4*wire.SlotsPerShard || got.Owners != nil || want.Slots != got.Slots {
			t.Fatalf("%s: SlotTable = %d slots, owners %v; want the map's bootstrap layout of 4 shards (%d slots)", when, got.Slots, got.Owners, want.Slots)
		}
	}
	check("ready")
	check("cached")
	// A table cached at an older index is read again: plant one that is
	// not the map's, then let meta apply something.
	before := n.Meta().AppliedIndex()
	n.shards.table.Store(&tableAt{index: before, table: wire.DefaultSlotTable(1)})
	if got := n.SlotTable(); got.Slots != wire.SlotsPerShard {
		t.Fatalf("the planted table was not served at its index: %d slots", got.Slots)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := n.Meta().CreateQueue(ctx, "q", nil); err != nil {
		t.Fatal(err)
	}
	if n.Meta().AppliedIndex() == before {
		t.Fatal("creating a queue applied nothing")
	}
	check("after a meta change")
}
