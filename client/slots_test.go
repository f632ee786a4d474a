package client

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/client/clienttest"
	"github.com/raftq/raftq/router"
	"github.com/raftq/raftq/shard"
	"github.com/raftq/raftq/wire"
)

// flipped is a table of 2 shards and 512 slots in which every slot is
// owned by the shard the bootstrap layout does not give it: a client
// routing by the plain hash sends every keyed message to the wrong shard.
func flipped() []uint32 {
	owners := make([]uint32, 2*wire.SlotsPerShard)
	for s := range owners {
		owners[s] = 1 - uint32(s)%2
	}
	return owners
}

// The table a ShardMap answer carries is the client's, unless it cannot be
// the cluster's (then the bootstrap layout, which only costs hops); a
// server that predates tables sends none, meaning the bootstrap layout.
func TestShardMapSlotTable(t *testing.T) {
	owners := flipped()
	for _, c := range []struct {
		name   string
		resp   *raftqv1.ShardMapResponse
		owners []uint32 // want; nil: the bootstrap layout
	}{
		{"older server", &raftqv1.ShardMapResponse{ShardCount: 2}, nil},
		{"bootstrap layout", &raftqv1.ShardMapResponse{ShardCount: 2, Slots: 512}, nil},
		{"explicit owners", &raftqv1.ShardMapResponse{ShardCount: 2, Slots: 512, SlotOwners: owners}, owners},
		{"owners of another slot count", &raftqv1.ShardMapResponse{ShardCount: 2, Slots: 512, SlotOwners: owners[:256]}, nil},
		{"owner beyond the shards", &raftqv1.ShardMapResponse{ShardCount: 1, Slots: 512, SlotOwners: owners}, nil},
		{"slot count not a multiple", &raftqv1.ShardMapResponse{ShardCount: 2, Slots: 500}, nil},
		{"bootstrap layout of another count", &raftqv1.ShardMapResponse{ShardCount: 2, Slots: 1024}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := newShardMap(c.resp, nil).table
			want := wire.SlotTable{Slots: c.resp.GetShardCount() * wire.SlotsPerShard, Owners: c.owners}
			if c.owners != nil {
				want.Slots = uint32(len(c.owners))
			}
			if got.Slots != want.Slots || fmt.Sprint(got.Owners) != fmt.Sprint(want.Owners) {
				t.Fatalf("table = %d slots, owners %v; want %d, %v", got.Slots, got.Owners, want.Slots, want.Owners)
			}
			if m := newShardMap(c.resp, nil).withLeader(0, "h:1", nil); m.table.Slots != got.Slots {
				t.Fatal("a leader hint dropped the slot table")
			}
		})
	}
}

// Grouped, dedup-keyed and auto-keyed sends, alone and in batches, go to
// the shard the cluster's slot table names, not the one the plain hash
// does: each fake node keeps what it is sent, so a message's id names the
// shard the client chose.
func TestSendsFollowAnExplicitSlotTable(t *testing.T) {
	a, b := twoNodes(t)
	owners := flipped()
	table := wire.SlotTable{Slots: uint32(len(owners)), Owners: owners}
	for _, s := range []*clienttest.Server{a, b} {
		s.SetSlotTable(table.Slots, owners)
	}
	c := mustDial(t, []string{a.Addr})
	createOn(t, "q", a, b)
	ctx := testCtx(t)
	check := func(what, id, group, key string) {
		t.Helper()
		want, _ := table.ShardForMessage("q", group, key)
		if old, _ := wire.ShardForMessage("q", group, key, 2); old == want {
			t.Fatalf("%s: the flipped table places it where the plain hash does", what)
		}
		if mid, _ := wire.ParseMessageID(id); mid.Shard != want {
			t.Fatalf("%s (group %q, key %q) landed on shard %d, the table places it on %d", what, group, key, mid.Shard, want)
		}
	}
	for i := range 8 {
		g := fmt.Sprintf("g%d", i)
		check("grouped send", mustSend(t, c, "q", "x", Group(g)).ID, g, "")
		k := fmt.Sprintf("k%d", i)
		check("keyed send", mustSend(t, c, "q", "x", DedupKey(k)).ID, "", k)
		r := mustSend(t, c, "q", "x")
		info, err := c.GetMessage(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		check("auto-keyed send", r.ID, "", info.DedupKey)
	}
	items := make([]Outgoing, 10)
	for i := range items {
		items[i] = Outgoing{Body: []byte(fmt.Sprint(i))}
	}
	res, err := c.SendBatch(ctx, "q", items)
	if err != nil {
		t.Fatalf("SendBatch: %v", err)
	}
	for _, r := range res {
		info, err := c.GetMessage(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		check("auto-keyed batch item", r.ID, "", info.DedupKey)
	}
	if n := len(a.Calls("SendBatch")) + len(b.Calls("SendBatch")); n == 0 {
		t.Fatal("no SendBatch calls recorded")
	}
}

// A client dialled before the table changed keeps routing by its old one
// (servers re-route, at the cost of a hop) until a failed call refreshes
// its map; from then it follows the new table.
func TestRefreshPicksUpANewSlotTable(t *testing.T) {
	a, b := twoNodes(t)
	c := mustDial(t, []string{a.Addr}, fastRetry(3))
	createOn(t, "q", a, b)
	g := groupOn("q", 1) // on shard 1 by the plain hash, on 0 once flipped
	if id, _ := wire.ParseMessageID(mustSend(t, c, "q", "x", Group(g)).ID); id.Shard != 1 {
		t.Fatalf("before the change: shard %d, want 1", id.Shard)
	}
	owners := flipped()
	for _, s := range []*clienttest.Server{a, b} {
		s.SetSlotTable(uint32(len(owners)), owners)
	}
	if id, _ := wire.ParseMessageID(mustSend(t, c, "q", "x", Group(g)).ID); id.Shard != 1 {
		t.Fatalf("stale table: shard %d, want the old owner 1 (the server re-routes)", id.Shard)
	}
	// A refusal makes the client reload its map before retrying, at most
	// every minRefreshGap; Dial loaded it just now.
	time.Sleep(minRefreshGap + 50*time.Millisecond)
	b.Refuse("SendBatch", 1, "")
	mustSend(t, c, "q", "x", Group(g))
	// (Where that send landed says nothing: the refusal has b passed over
	// for a while.)
	if s := c.shardOf("q", g, ""); s != 0 {
		t.Fatalf("after a refresh the client routes the group to shard %d, want the new owner 0", s)
	}
}

// tableTopo is a router topology of n shards, all led elsewhere, with a
// given slot table: what a node routes keyed sends by.
type tableTopo struct {
	n     uint32
	table wire.SlotTable
}

func (t tableTopo) NodeID() string                                { return "n1" }
func (t tableTopo) ShardCount() uint32                            { return t.n }
func (t tableTopo) DedupPeers(string, uint32) []router.PriorOwner { return nil }
func (t tableTopo) SlotTable() wire.SlotTable                     { return t.table }
func (t tableTopo) LocalShard(uint32) *shard.Shard                { return nil }
func (t tableTopo) ShardReplicas(uint32) []string                 { return nil }
func (t tableTopo) ShardLeader(uint32) (string, string, bool)     { return "", "", false }
func (t tableTopo) NoteLeader(uint32, string)                     {}
func (t tableTopo) MemberGRPC(string) (string, bool)              { return "", false }
func (t tableTopo) MemberPeer(string) (string, bool)              { return "", false }

// With the table a ShardMap answer carries, the client places every keyed
// message on the shard a node's router does: a client that agrees with its
// cluster's table costs no hop.
func TestClientRoutesKeyedSendsAsTheRouter(t *testing.T) {
	const n = 4
	owners := make([]uint32, 2*wire.SlotsPerShard) // a cluster of 2 grown to 4
	for s := range owners {
		owners[s] = uint32(s*7+s/3) % n
	}
	table := wire.SlotTable{Slots: uint32(len(owners)), Owners: owners}
	rt := router.New(tableTopo{n: n, table: table}, router.Options{})
	t.Cleanup(func() { _ = rt.Close() })
	m := newShardMap(&raftqv1.ShardMapResponse{ShardCount: n, Slots: table.Slots, SlotOwners: owners}, nil)
	for i := range 2000 {
		group, key := "", fmt.Sprintf("key-%d", i)
		if i%2 == 0 {
			group, key = fmt.Sprintf("group-%d", i), ""
		}
		want, err := rt.ShardForSend("orders", group, key)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.shardOf("orders", group, key); got != int(want) {
			t.Fatalf("group %q key %q: client shard %d, router shard %d", group, key, got, want)
		}
	}
	if got := m.shardOf("orders", "", ""); got != anyShard {
		t.Fatalf("an unkeyed message is placed on shard %d by the client; the server picks", got)
	}
}

// Auto keys land on the wanted shard through an explicit table too, and a
// shard the table gives no slot still gets a key (placed elsewhere).
func TestAutoKeyOnExplicitTable(t *testing.T) {
	owners := flipped()
	table := wire.SlotTable{Slots: uint32(len(owners)), Owners: owners}
	for shard := range uint32(2) {
		k := autoKeyOn("q", shard, table, 2)
		if s, _ := table.ShardForMessage("q", "", k); s != shard {
			t.Fatalf("autoKeyOn(q, %d) = %q, which the table places on %d", shard, k, s)
		}
	}
	none := wire.SlotTable{Slots: 512, Owners: make([]uint32, 512)} // all on shard 0
	if k := autoKeyOn("q", 1, none, 2); k == "" {
		t.Fatal("no key for a shard without slots")
	}
}

// The slot-moving refusal is recognised by the text the router puts in it.
func TestSlotMovingRefusal(t *testing.T) {
	if slotMovingText != router.SlotMovingText {
		t.Fatalf("client looks for %q, the router writes %q", slotMovingText, router.SlotMovingText)
	}
	moving := status.Error(codes.Unavailable, (&router.SlotMovingError{Queue: "q", Slot: 3, Keyed: true}).Error())
	if !slotMoving(moving) {
		t.Fatalf("%v not recognised", moving)
	}
	if slotMoving(status.Error(codes.Unavailable, "no leader")) || slotMoving(status.Error(codes.Internal, router.SlotMovingText)) {
		t.Fatal("other errors taken for a slot-moving refusal")
	}
}
