package cluster

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/router"
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

// A queue created after a move was routed has no key on the slot's prior
// owner, and a queue's keys there are gone a dedup window after the route:
// neither is asked; an unknown queue or a move without a route time is.
func TestPriorsForAQueue(t *testing.T) {
	peers := []meta.PriorOwner{{Shard: 0, Move: 1, RoutedMs: 100_000}, {Shard: 2, Move: 2}}
	window := &fsmpb.QueuePolicy{DedupWindowMs: 60_000}
	shards := func(ps []router.PriorOwner) []uint32 {
		var out []uint32
		for _, p := range ps {
			out = append(out, p.Shard)
		}
		return out
	}
	for _, c := range []struct {
		name  string
		q     meta.Queue
		known bool
		now   int64
		want  []uint32
	}{
		{"older queue in its window", meta.Queue{CreatedMs: 50_000, Policy: window}, true, 150_000, []uint32{0, 2}},
		{"older queue past its window", meta.Queue{CreatedMs: 50_000, Policy: window}, true, 160_001, []uint32{2}},
		{"created within the clock skew of the route", meta.Queue{CreatedMs: 100_500, Policy: window}, true, 120_000, []uint32{0, 2}},
		{"created after the route", meta.Queue{CreatedMs: 102_000, Policy: window}, true, 120_000, []uint32{2}},
		{"unknown queue", meta.Queue{}, false, 10_000_000, []uint32{0, 2}},
	} {
		if got := shards(priorsFor(peers, c.q, c.known, c.now)); !slices.Equal(got, c.want) {
			t.Errorf("%s: asks %v, want %v", c.name, got, c.want)
		}
	}
}
