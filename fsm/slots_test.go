package fsm

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/wire"
)

const testSlots = 2 * wire.SlotsPerShard // a cluster bootstrapped with 2 shards

func sealCmd(move uint64, to uint32, slotCount uint32, slots ...uint32) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_SealSlots{SealSlots: &fsmpb.SealSlots{MoveId: move, Slots: slots, SlotCount: slotCount, ToShard: to}}}
}
func unsealCmd(move uint64) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_UnsealSlots{UnsealSlots: &fsmpb.UnsealSlots{MoveId: move}}}
}
func holdCmd(move uint64, from uint32, items ...*fsmpb.QueueGroup) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_HoldGroups{HoldGroups: &fsmpb.HoldGroups{MoveId: move, FromShard: from, Items: items}}}
}
func releaseCmd(move uint64, all bool, items ...*fsmpb.QueueGroup) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_ReleaseGroups{ReleaseGroups: &fsmpb.ReleaseGroups{MoveId: move, Items: items, All: all}}}
}
func qg(q, g string) *fsmpb.QueueGroup { return &fsmpb.QueueGroup{Queue: q, Group: g} }

func slotOf(queue, group, key string) uint32 {
	s, ok := wire.SlotForMessage(queue, group, key, testSlots)
	if !ok {
		panic("unkeyed")
	}
	return s
}

// groupsIn returns n distinct group names of queue whose slot is slot (or,
// with slot < 0, whose slot is none of avoid).
func groupsIn(queue string, slot int, n int, avoid ...uint32) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		g := fmt.Sprint("g", i)
		s := slotOf(queue, g, "")
		if (slot >= 0 && s == uint32(slot)) || (slot < 0 && !slices.Contains(avoid, s)) {
			out = append(out, g)
		}
	}
	return out
}

// keyOutside returns a dedup key of queue whose slot is none of avoid.
func keyOutside(queue string, avoid ...uint32) string {
	for i := 0; ; i++ {
		k := fmt.Sprint("k", i)
		if !slices.Contains(avoid, slotOf(queue, "", k)) {
			return k
		}
	}
}

func itemCodesOf(r *fsmpb.Result) []fsmpb.Code {
	var out []fsmpb.Code
	for _, it := range r.GetEnqueue().GetItems() {
		out = append(out, it.GetStatus().GetCode())
	}
	return out
}

func liveNames(gs []*fsmpb.QueueGroup) []string {
	var out []string
	for _, g := range gs {
		out = append(out, g.GetQueue()+"/"+g.GetGroup())
	}
	return out
}

// A seal refuses, item by item, the keyed messages of its slots (by group
// when there is one, else by dedup key) and writes nothing for them, while
// the other items of the same enqueue, keyed elsewhere or unkeyed, go in.
func TestSealRefusesKeyedItemsOfSealedSlots(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("std", nil)
	gSealed := groupsIn("std", 7, 1)[0]
	kSealed := "key-a"
	sealed := []uint32{7, slotOf("std", "", kSealed)}
	gFree := groupsIn("std", -1, 1, sealed...)[0]
	kFree := keyOutside("std", sealed...)
	r := h.mustOK(sealCmd(9, 2, testSlots, sealed...))
	if len(r.GetSeal().GetLiveGroups()) != 0 {
		t.Fatalf("seal of an empty shard reports live groups %v", r.GetSeal().GetLiveGroups())
	}

	before := h.f.Counters().GetEnqueued()
	res := h.mustOK(enqueueCmd("std",
		&fsmpb.NewMessage{GroupId: gSealed, Body: []byte("1")},
		&fsmpb.NewMessage{GroupId: gFree, Body: []byte("2")},
		body("3"),
		&fsmpb.NewMessage{DedupKey: kSealed, Body: []byte("4")},
		&fsmpb.NewMessage{DedupKey: kFree, Body: []byte("5")},
		// Placed by its group, not by its key: goes in.
		&fsmpb.NewMessage{GroupId: gFree, DedupKey: kSealed, Body: []byte("6")},
	))
	want := []fsmpb.Code{fsmpb.Code_CODE_SLOT_MOVED, fsmpb.Code_CODE_OK, fsmpb.Code_CODE_OK,
		fsmpb.Code_CODE_SLOT_MOVED, fsmpb.Code_CODE_OK, fsmpb.Code_CODE_OK}
	if got := itemCodesOf(res); !slices.Equal(got, want) {
		t.Fatalf("item codes %v, want %v", got, want)
	}
	items := res.GetEnqueue().GetItems()
	if msg := items[0].GetStatus().GetMessage(); !strings.Contains(msg, "slot 7 moved to shard 2") {
		t.Errorf("refusal says %q, want it to name the slot and the shard", msg)
	}
	if items[0].GetMessageId() != 0 || items[3].GetMessageId() != 0 {
		t.Errorf("refused items carry ids %d, %d", items[0].GetMessageId(), items[3].GetMessageId())
	}
	if n := h.f.Counters().GetEnqueued() - before; n != 4 {
		t.Errorf("%d messages enqueued, want 4", n)
	}
	// kSealed was written by item 6 (its slot is its group's): the seal
	// refused item 4's key before any dedup entry was made for it.
	if id, ok := h.f.LookupDedup("std", kSealed); !ok || id != items[5].GetMessageId() {
		t.Errorf("LookupDedup(%s) = %d, %v; want item 6's id %d", kSealed, id, ok, items[5].GetMessageId())
	}

	// Refused items change nothing at all.
	d := stateDigest(t, h.f)
	res = h.mustOK(enqueueCmd("std", &fsmpb.NewMessage{GroupId: gSealed}, &fsmpb.NewMessage{DedupKey: "key-a"}))
	if got := itemCodesOf(res); !slices.Equal(got, []fsmpb.Code{fsmpb.Code_CODE_SLOT_MOVED, fsmpb.Code_CODE_OK}) {
		// key-a is live now (item 6), so the second is a dedup hit.
		t.Fatalf("item codes %v", got)
	}
	if !res.GetEnqueue().GetItems()[1].GetDeduplicated() {
		t.Fatal("second item not a dedup hit")
	}
	if stateDigest(t, h.f) != d {
		t.Fatal("an enqueue of refused items and a dedup hit changed the state")
	}
	if err := checkInvariants(h.f); err != nil {
		t.Fatal(err)
	}
}

// A key written before the seal still deduplicates on the sealed shard (the
// message is here); once its window ends the key is refused like any new
// keyed message of the slot.
func TestSealKeepsPreSealDedup(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("q", &fsmpb.QueuePolicy{DedupWindowMs: 10_000})
	id := h.mustEnqueue("q", &fsmpb.NewMessage{DedupKey: "k", Body: []byte("x")})[0]
	h.mustOK(sealCmd(1, 3, testSlots, slotOf("q", "", "k")))
	h.now += 5_000
	it := h.mustOK(enqueueCmd("q", &fsmpb.NewMessage{DedupKey: "k"})).GetEnqueue().GetItems()[0]
	if it.GetStatus().GetCode() != fsmpb.Code_CODE_OK || !it.GetDeduplicated() || it.GetMessageId() != id {
		t.Fatalf("duplicate of a pre-seal key: %v, want the original id %d", it, id)
	}
	h.now += 5_000
	it = h.mustOK(enqueueCmd("q", &fsmpb.NewMessage{DedupKey: "k"})).GetEnqueue().GetItems()[0]
	if it.GetStatus().GetCode() != fsmpb.Code_CODE_SLOT_MOVED {
		t.Fatalf("key after its window on a sealed slot: %v, want SLOT_MOVED", it.GetStatus())
	}
	if _, ok := h.f.LookupDedup("q", "k"); ok {
		t.Fatal("expired key still found")
	}
}

// The seal reports exactly the FIFO groups of its slots with ready,
// delayed or leased messages here, by queue then group; it is idempotent,
// another move takes a slot over, and a different slot count is refused.
func TestSealResultListsLiveFIFOGroups(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("f", fifoPolicy())
	h.mustQueue("f2", fifoPolicy())
	h.mustQueue("std", nil)
	in := groupsIn("f", 11, 5)
	gReady, gDelayed, gLeased, gAcked, gDead := in[0], in[1], in[2], in[3], in[4]
	gOther := groupsIn("f", -1, 1, 11, 12)[0]
	gF2 := groupsIn("f2", 12, 1)[0]
	gStd := groupsIn("std", 11, 1)[0]
	h.mustEnqueue("f", grouped(gAcked, "a"))
	h.mustEnqueue("f", grouped(gDead, "d"))
	for _, m := range h.mustReceive("f", 10, 60_000) {
		if m.GetGroupId() == gAcked {
			h.mustOK(ackCmd(receipt(m)))
		} else {
			h.mustOK(deadLetterCmd(receipt(m), "poison"))
		}
	}
	h.mustEnqueue("f", grouped(gLeased, "l"))
	h.mustReceive("f", 1, 60_000)
	h.mustEnqueue("f", grouped(gReady, "r"), grouped(gOther, "o"), &fsmpb.NewMessage{GroupId: gDelayed, DelayMs: 60_000})
	h.mustEnqueue("f2", grouped(gF2, "x"))
	h.mustEnqueue("std", grouped(gStd, "s"))

	want := []string{"f/" + gReady, "f/" + gDelayed, "f/" + gLeased, "f2/" + gF2}
	slices.Sort(want[:3])
	r := h.mustOK(sealCmd(5, 1, testSlots, 11, 12))
	if got := liveNames(r.GetSeal().GetLiveGroups()); !slices.Equal(got, want) {
		t.Fatalf("live groups %v, want %v", got, want)
	}
	again := h.mustOK(sealCmd(5, 1, testSlots, 11, 12))
	if got := liveNames(again.GetSeal().GetLiveGroups()); !slices.Equal(got, want) {
		t.Fatalf("repeated seal: live groups %v, want %v", got, want)
	}
	if n, seals := h.f.Seals(); n != testSlots || !slices.Equal(seals, []SlotSeal{{11, 5, 1}, {12, 5, 1}}) {
		t.Fatalf("seals %d %v", n, seals)
	}
	// Move 6 takes slot 12 over; unsealing move 5 leaves it sealed.
	h.mustOK(sealCmd(6, 2, testSlots, 12))
	if move, to, ok := h.f.SealedSlot(12); !ok || move != 6 || to != 2 {
		t.Fatalf("slot 12 sealed by %d to %d (%v), want move 6 to 2", move, to, ok)
	}
	if n := h.mustOK(unsealCmd(5)).GetCount().GetCount(); n != 1 {
		t.Fatalf("unseal of move 5 dropped %d slots, want 1", n)
	}
	if _, _, ok := h.f.SealedSlot(11); ok {
		t.Fatal("slot 11 still sealed")
	}
	if _, _, ok := h.f.SealedSlot(12); !ok {
		t.Fatal("slot 12 of move 6 unsealed with move 5")
	}
	if c := h.one(sealCmd(7, 1, 3*wire.SlotsPerShard, 1)).GetStatus().GetCode(); c != fsmpb.Code_CODE_FAILED_PRECONDITION {
		t.Fatalf("seal with another slot count: %v, want FAILED_PRECONDITION", c)
	}
}

// Unsealing a move accepts the keyed sends it refused.
func TestUnsealRestoresSends(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("q", nil)
	g := groupsIn("q", 3, 1)[0]
	h.mustOK(sealCmd(4, 1, testSlots, 3))
	if c := itemCodesOf(h.mustOK(enqueueCmd("q", grouped(g, "1")))); c[0] != fsmpb.Code_CODE_SLOT_MOVED {
		t.Fatalf("sealed: %v", c)
	}
	if n := h.mustOK(unsealCmd(4)).GetCount().GetCount(); n != 1 {
		t.Fatalf("unsealed %d slots", n)
	}
	if n, seals := h.f.Seals(); n != 0 || len(seals) != 0 {
		t.Fatalf("after unseal: slot count %d, seals %v", n, seals)
	}
	h.mustEnqueue("q", grouped(g, "1"))
	// With no seals left, another slot count is fine.
	h.mustOK(sealCmd(8, 1, 4*wire.SlotsPerShard, 3))
}

// A held group is never leased while other groups are; its messages queue
// in order and, once released, are delivered in that order, waking
// waiters. A hold may come before the group has any message here.
func TestHeldGroupNeverLeased(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("f", fifoPolicy())
	r := h.mustOK(holdCmd(3, 0, qg("f", "held"), qg("f", "held"), qg("nosuchqueue", "g")))
	if n := r.GetCount().GetCount(); n != 2 {
		t.Fatalf("held %d, want 2 (a repeated item counts once)", n)
	}
	msgIDs := h.mustEnqueue("f", grouped("held", "1"), grouped("free", "2"), grouped("held", "3"))
	got := h.mustReceive("f", 10, 60_000)
	if len(got) != 1 || got[0].GetId() != msgIDs[1] {
		t.Fatalf("received %v, want only the free group's %d", ids(got), msgIDs[1])
	}
	if st := h.mustStats("f"); st.Leasable != 0 || st.Ready != 2 {
		t.Fatalf("stats %+v: want 2 ready, none leasable", st)
	}
	h.mustOK(ackCmd(receipt(got[0])))
	if got := h.mustReceive("f", 10, 60_000); len(got) != 0 {
		t.Fatalf("received %v from a held group", ids(got))
	}
	if err := checkInvariants(h.f); err != nil {
		t.Fatal(err)
	}
	h.woken = nil
	if n := h.mustOK(releaseCmd(3, false, qg("f", "held"))).GetCount().GetCount(); n != 1 {
		t.Fatalf("released %d", n)
	}
	if !slices.Equal(h.woken, []string{"f"}) {
		t.Fatalf("release woke %v, want [f]", h.woken)
	}
	for _, want := range []uint64{msgIDs[0], msgIDs[2]} {
		got := h.mustReceive("f", 10, 60_000)
		if len(got) != 1 || got[0].GetId() != want {
			t.Fatalf("received %v, want %d", ids(got), want)
		}
		h.mustOK(ackCmd(receipt(got[0])))
	}
	if hs := h.f.Holds(); len(hs) != 1 || hs[0] != (MoveHolds{MoveID: 3, From: 0, Groups: 1}) {
		t.Fatalf("holds %v, want move 3 holding the other queue's group", hs)
	}
}

// A hold takes a ready head out of reach at once; a head already leased
// keeps its lease, and once it ends the group waits for the release.
func TestHoldOfAGroupWithMessages(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("f", fifoPolicy())
	msgIDs := h.mustEnqueue("f", grouped("a", "1"), grouped("b", "2"), grouped("b", "3"))
	leased := h.mustReceive("f", 1, 60_000)[0] // a's head
	h.mustOK(holdCmd(1, 4, qg("f", "a"), qg("f", "b")))
	if got := h.mustReceive("f", 10, 60_000); len(got) != 0 {
		t.Fatalf("received %v from held groups", ids(got))
	}
	h.mustOK(nackCmd(nackDelay(receipt(leased), 0, "again")))
	if got := h.mustReceive("f", 10, 60_000); len(got) != 0 {
		t.Fatalf("received %v: a nacked head of a held group", ids(got))
	}
	if err := checkInvariants(h.f); err != nil {
		t.Fatal(err)
	}
	// Two moves hold b: it stays held until both release it.
	h.mustOK(holdCmd(2, 5, qg("f", "b")))
	if n := h.mustOK(releaseCmd(1, true)).GetCount().GetCount(); n != 2 {
		t.Fatalf("release all of move 1 dropped %d holds, want 2", n)
	}
	got := h.mustReceive("f", 10, 60_000)
	if len(got) != 1 || got[0].GetId() != msgIDs[0] {
		t.Fatalf("received %v, want a's head %d only", ids(got), msgIDs[0])
	}
	if g := liveNames(h.f.HeldGroups(2)); !slices.Equal(g, []string{"f/b"}) {
		t.Fatalf("move 2 holds %v", g)
	}
	h.mustOK(releaseCmd(2, false, qg("f", "b")))
	got = h.mustReceive("f", 10, 60_000)
	if len(got) != 1 || got[0].GetId() != msgIDs[1] {
		t.Fatalf("received %v, want b's head %d", ids(got), msgIDs[1])
	}
	if len(h.f.Holds()) != 0 {
		t.Fatalf("holds left: %v", h.f.Holds())
	}
}

// Deleting a queue drops its holds; purging keeps them (the group's old
// shard keeps its leased messages through a purge).
func TestQueueDeleteDropsHoldsPurgeKeeps(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("f", fifoPolicy())
	h.mustQueue("k", fifoPolicy())
	h.mustOK(holdCmd(1, 0, qg("f", "g"), qg("k", "g")))
	h.mustOK(purgeCmd("k"))
	h.mustOK(deleteCmd("f"))
	if !h.f.IsHeld("k", "g") || h.f.IsHeld("f", "g") {
		t.Fatalf("held after purge k and delete f: k/g %v, f/g %v; want true, false", h.f.IsHeld("k", "g"), h.f.IsHeld("f", "g"))
	}
	h.mustQueue("f", fifoPolicy())
	id := h.mustEnqueue("f", grouped("g", "1"))[0]
	if got := h.mustReceive("f", 1, 1000); len(got) != 1 || got[0].GetId() != id {
		t.Fatalf("recreated queue: received %v, want %d", ids(got), id)
	}
}

// Seals and holds survive snapshot and restore and keep acting; a state
// without them writes exactly the snapshot of one that never had them, so
// builds that predate them read it.
func TestSealsAndHoldsSnapshot(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("f", fifoPolicy())
	g := groupsIn("f", 20, 1)[0]
	h.mustOK(sealCmd(2, 1, testSlots, 20, 21))
	h.mustOK(holdCmd(3, 1, qg("f", "held"), qg("later", "x")))
	h.mustEnqueue("f", grouped("held", "1"))
	want, idx := mustDigest(t, h.f)
	r := mustRestore(t, mustSnapshot(t, h.f))
	if got, gotIdx := mustDigest(t, r); got != want || gotIdx != idx {
		t.Fatal("restored digest differs")
	}
	if err := checkInvariants(r); err != nil {
		t.Fatal(err)
	}
	h2 := &harness{t: t, f: r, index: h.index, term: h.term, now: h.now, seed: h.seed}
	if c := itemCodesOf(h2.mustOK(enqueueCmd("f", grouped(g, "x")))); c[0] != fsmpb.Code_CODE_SLOT_MOVED {
		t.Fatalf("restored seal: %v", c)
	}
	if got := h2.mustReceive("f", 10, 1000); len(got) != 0 {
		t.Fatalf("restored hold: received %v", ids(got))
	}
	if hs := r.Holds(); len(hs) != 1 || hs[0] != (MoveHolds{MoveID: 3, From: 1, Groups: 2}) {
		t.Fatalf("restored holds %v", hs)
	}

	// Dropped again, the state serializes as if they never were.
	plain := newHarness(t)
	plain.mustQueue("f", fifoPolicy())
	plain.mustEnqueue("f", grouped("held", "1"))
	h.now = plain.now
	h.mustOK(unsealCmd(2))
	h.mustOK(releaseCmd(3, true))
	if stateDigest(t, h.f) != stateDigest(t, plain.f) {
		t.Fatal("a state whose seals and holds were dropped serializes differently from one that never had them")
	}
}

// A snapshot whose seal or hold records are malformed is refused.
func TestRestoreRefusesBadSealsAndHolds(t *testing.T) {
	for name, mut := range map[string]func(s *state){
		"slot beyond count": func(s *state) { s.seals[testSlots] = slotSeal{move: 1} },
		"no slot count":     func(s *state) { s.slotCount = 0 },
		"move 0 seal":       func(s *state) { s.seals[1] = slotSeal{} },
		"move 0 hold":       func(s *state) { s.holds.ReplaceOrInsert(holdItem{queue: "q", group: "g"}) },
		"empty group":       func(s *state) { s.holds.ReplaceOrInsert(holdItem{queue: "q", move: 1}) },
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			h.mustOK(sealCmd(1, 1, testSlots, 5))
			h.f.mu.Lock()
			mut(h.f.s)
			h.f.mu.Unlock()
			f := New(Options{})
			if err := f.Restore(io.NopCloser(bytes.NewReader(mustSnapshot(t, h.f)))); err == nil {
				t.Fatal("restored")
			}
		})
	}
}

// LiveGroups keeps the groups that still have live messages; acked,
// dead-lettered and unknown ones drop out.
func TestLiveGroupsShrink(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("f", fifoPolicy())
	h.mustEnqueue("f", grouped("a", "1"), grouped("b", "2"), grouped("c", "3"), &fsmpb.NewMessage{GroupId: "d", DelayMs: 10_000})
	items := []*fsmpb.QueueGroup{qg("f", "a"), qg("f", "b"), qg("f", "c"), qg("f", "d"), qg("f", "none"), qg("nosuch", "a")}
	if got := liveNames(h.f.LiveGroups(items)); !slices.Equal(got, []string{"f/a", "f/b", "f/c", "f/d"}) {
		t.Fatalf("live %v", got)
	}
	for _, m := range h.mustReceive("f", 10, 60_000) {
		switch m.GetGroupId() {
		case "a":
			h.mustOK(ackCmd(receipt(m)))
		case "b":
			h.mustOK(deadLetterCmd(receipt(m), "poison"))
		}
	}
	if got := liveNames(h.f.LiveGroups(items)); !slices.Equal(got, []string{"f/c", "f/d"}) {
		t.Fatalf("live after ack and dead-letter %v, want [f/c f/d] (c leased, d delayed)", got)
	}
}

// LookupDedup answers as an enqueue of the key would: the live key's
// message; nothing for an unknown key or queue, an expired key, or a key
// of a deleted queue of the same name.
func TestLookupDedup(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("q", &fsmpb.QueuePolicy{DedupWindowMs: 1_000})
	id := h.mustEnqueue("q", &fsmpb.NewMessage{DedupKey: "k"})[0]
	if got, ok := h.f.LookupDedup("q", "k"); !ok || got != id {
		t.Fatalf("hit: %d %v, want %d", got, ok, id)
	}
	for _, c := range [][2]string{{"q", "other"}, {"nosuch", "k"}, {"q", ""}} {
		if got, ok := h.f.LookupDedup(c[0], c[1]); ok {
			t.Errorf("LookupDedup(%q, %q) = %d, want a miss", c[0], c[1], got)
		}
	}
	h.mustOK(deleteCmd("q"))
	h.mustQueue("q", &fsmpb.QueuePolicy{DedupWindowMs: 1_000})
	if got, ok := h.f.LookupDedup("q", "k"); ok {
		t.Fatalf("key of the deleted queue found: %d", got)
	}
	id = h.mustEnqueue("q", &fsmpb.NewMessage{DedupKey: "k"})[0]
	if got, ok := h.f.LookupDedup("q", "k"); !ok || got != id {
		t.Fatalf("hit in the new queue: %d %v, want %d", got, ok, id)
	}
	h.now += 1_000
	h.mustOK(tickCmd())
	if got, ok := h.f.LookupDedup("q", "k"); ok {
		t.Fatalf("expired key found: %d", got)
	}
}

// Malformed slot move commands are refused whole and change nothing.
func TestSlotMoveCommandValidation(t *testing.T) {
	h := newHarness(t)
	many := make([]*fsmpb.QueueGroup, MaxGroupItems+1)
	for i := range many {
		many[i] = qg("q", fmt.Sprint(i))
	}
	bad := map[string]*fsmpb.Command{
		"seal move 0":           sealCmd(0, 1, testSlots, 1),
		"seal count 0":          sealCmd(1, 1, 0, 1),
		"seal count not x256":   sealCmd(1, 1, 300, 1),
		"seal count too large":  sealCmd(1, 1, MaxSlotCount+wire.SlotsPerShard, 1),
		"seal slot beyond":      sealCmd(1, 1, testSlots, testSlots),
		"seal no slots":         sealCmd(1, 1, testSlots),
		"unseal move 0":         unsealCmd(0),
		"hold move 0":           holdCmd(0, 1, qg("q", "g")),
		"hold nothing":          holdCmd(1, 1),
		"hold bad queue":        holdCmd(1, 1, qg("bad name", "g")),
		"hold empty group":      holdCmd(1, 1, qg("q", "")),
		"hold too many":         holdCmd(1, 1, many...),
		"release move 0":        releaseCmd(0, true),
		"release nothing":       releaseCmd(1, false),
		"release items and all": releaseCmd(1, true, qg("q", "g")),
		"release too many":      releaseCmd(1, false, many...),
	}
	h.mustOK(tickCmd()) // the clock moves with the first entry
	before := stateDigest(t, h.f)
	for name, c := range bad {
		if code := h.one(c).GetStatus().GetCode(); code != fsmpb.Code_CODE_INVALID_ARGUMENT {
			t.Errorf("%s: %v, want INVALID_ARGUMENT", name, code)
		}
		if stateDigest(t, h.f) != before {
			t.Fatalf("%s: the refused command changed the state", name)
		}
	}
}

// A dead message of a FIFO group whose slot moved stays dead on a redrive
// (by id or by count): live again on the old shard, its group would have a
// head there and one on the new shard. Other groups' dead messages, and a
// standard queue's, are redriven as before; the skipped ones can still be
// discarded.
func TestRedriveSkipsFIFOGroupsOfSealedSlots(t *testing.T) {
	h := newHarness(t)
	fifo := &fsmpb.QueuePolicy{Mode: fsmpb.QueueMode_QUEUE_MODE_FIFO}
	h.mustQueue("f", fifo)
	h.mustQueue("s", nil)
	gMoved := groupsIn("f", 11, 1)[0]
	gStays := groupsIn("f", -1, 1, 11)[0]
	sMoved := groupsIn("s", 11, 1)[0]
	kill := func(queue, group string) uint64 {
		id := h.mustEnqueue(queue, &fsmpb.NewMessage{GroupId: group, Body: []byte(group)})[0]
		ms := h.mustReceive(queue, 1, 30_000)
		if len(ms) != 1 || ms[0].GetId() != id {
			t.Fatalf("receive of %s/%s: %v", queue, group, ms)
		}
		h.mustOK(deadLetterCmd(&fsmpb.Receipt{MessageId: id, LeaseEpoch: ms[0].GetLeaseEpoch()}, "poison"))
		return id
	}
	moved, stays, std := kill("f", gMoved), kill("f", gStays), kill("s", sMoved)
	h.mustOK(sealCmd(4, 1, testSlots, 11))

	if n := h.mustOK(redriveCmd("f", 0, moved)).GetCount().GetCount(); n != 0 {
		t.Fatalf("redrive by id of a sealed group's message moved %d", n)
	}
	if n := h.mustOK(redriveCmd("f", 10)).GetCount().GetCount(); n != 1 {
		t.Fatalf("redrive of the oldest 10 moved %d, want only %s's", n, gStays)
	}
	if st := h.mustMessage(moved).GetState(); st != fsmpb.State_STATE_DEAD {
		t.Fatalf("the sealed group's message is %v, want dead", st)
	}
	if st := h.mustMessage(stays).GetState(); st != fsmpb.State_STATE_READY {
		t.Fatalf("the other group's message is %v, want ready", st)
	}
	if n := h.mustOK(redriveCmd("s", 0, std)).GetCount().GetCount(); n != 1 {
		t.Fatalf("a standard queue's message of a sealed slot: redrive moved %d, want 1", n)
	}
	if n := h.mustOK(discardCmd("f", 0, moved)).GetCount().GetCount(); n != 1 {
		t.Fatalf("discard of the sealed group's message removed %d, want 1", n)
	}
	if err := checkInvariants(h.f); err != nil {
		t.Fatal(err)
	}
}
