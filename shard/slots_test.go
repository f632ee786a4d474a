package shard

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/wire"
)

// groupInSlot is a group name of queue whose slot (of slots) is slot.
func groupInSlot(queue string, slot, slots uint32) string {
	for i := 0; ; i++ {
		g := fmt.Sprint("g", i)
		if s, _ := wire.SlotForMessage(queue, g, "", slots); s == slot {
			return g
		}
	}
}

// The slot move wrappers on a real three-replica shard: a seal reports the
// live FIFO groups of its slots and refuses their new sends on every
// replica; a held group's messages are taken but not leased, and its
// release wakes a waiting receiver; the reads answer on followers.
func TestSlotMoveCommands(t *testing.T) {
	c := newCluster(t, 3, true, fastTuning(), func(c *cluster) {
		c.nodeFormat = func(string) uint32 { return fsm.LogFormat }
	})
	leader := c.leader()
	sh := leader.sh
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	mustQueue(t, sh, "f", &fsmpb.QueuePolicy{Mode: fsmpb.QueueMode_QUEUE_MODE_FIFO})
	const slots = 2 * wire.SlotsPerShard
	g := groupInSlot("f", 5, slots)
	mustEnqueue(t, sh, "f", &fsmpb.NewMessage{GroupId: g, DedupKey: "k1"})

	live, err := sh.SealSlots(ctx, 1, []uint32{5}, slots, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(live) != 1 || live[0].GetQueue() != "f" || live[0].GetGroup() != g {
		t.Fatalf("live groups %v, want f/%s", live, g)
	}
	res := mustPropose(t, sh, enqueueCmd("f", &fsmpb.NewMessage{GroupId: g}))
	if code := res.GetEnqueue().GetItems()[0].GetStatus().GetCode(); code != fsmpb.Code_CODE_SLOT_MOVED {
		t.Fatalf("send to a sealed slot: %v, want SLOT_MOVED", code)
	}
	var cerr *CommandError
	if _, err := sh.SealSlots(ctx, 2, []uint32{6}, 3*wire.SlotsPerShard, 2); !errors.As(err, &cerr) ||
		cerr.Status.GetCode() != fsmpb.Code_CODE_FAILED_PRECONDITION {
		t.Fatalf("seal with another slot count: %v, want a FAILED_PRECONDITION CommandError", err)
	}
	if _, err := sh.SealSlots(ctx, 2, []uint32{slots}, slots, 2); !errors.Is(err, fsm.ErrInvalidArgument) {
		t.Fatalf("seal of a slot beyond the count: %v, want invalid argument", err)
	}

	// More groups than one entry holds.
	var held []*fsmpb.QueueGroup
	for i := range groupsPerProposal + 3 {
		held = append(held, &fsmpb.QueueGroup{Queue: "f", Group: fmt.Sprint("h", i)})
	}
	if err := sh.HoldGroups(ctx, 7, 0, held); err != nil {
		t.Fatal(err)
	}
	mustEnqueue(t, sh, "f", &fsmpb.NewMessage{GroupId: "h1", Body: []byte("1")})
	mustEnqueue(t, sh, "f", &fsmpb.NewMessage{GroupId: "h1", Body: []byte("2")})
	if got := mustReceive(t, sh, "f", 10, time.Minute); len(got) != 1 || got[0].GetGroupId() != g {
		t.Fatalf("received %v, want only the unheld group's message", got)
	}
	woke := make(chan error, 1)
	go func() { woke <- sh.Wait(ctx, "f") }()
	select {
	case err := <-woke:
		t.Fatalf("wait returned %v while only held messages are ready", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := sh.ReleaseGroups(ctx, 7, nil, true); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-woke:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("release did not wake the waiting receiver")
	}
	if got := mustReceive(t, sh, "f", 10, time.Minute); len(got) != 1 || string(got[0].GetBody()) != "1" {
		t.Fatalf("after release received %v, want h1's first message", got)
	}
	if err := sh.ReleaseGroups(ctx, 7, nil, false); !errors.Is(err, fsm.ErrInvalidArgument) {
		t.Fatalf("release of nothing: %v", err)
	}

	c.converge()
	for _, nd := range c.live() {
		if id, ok := nd.sh.LookupDedup("f", "k1"); !ok || id == 0 {
			t.Errorf("%s: LookupDedup(k1) = %d, %v", nd.id, id, ok)
		}
		if move, to, ok := nd.sh.SealedSlot(5); !ok || move != 1 || to != 2 {
			t.Errorf("%s: slot 5 sealed %v by %d to %d", nd.id, ok, move, to)
		}
		if got := nd.sh.LiveGroups(live); len(got) != 1 {
			t.Errorf("%s: live groups %v", nd.id, got)
		}
	}
	if n, err := sh.UnsealSlots(ctx, 1); err != nil || n != 1 {
		t.Fatalf("unseal: %d, %v", n, err)
	}
	mustEnqueue(t, sh, "f", &fsmpb.NewMessage{GroupId: g})
}

// Until every replica runs log format 4 the leader proposes none of them.
func TestSlotMoveCommandsNeedFormat4(t *testing.T) {
	c := newCluster(t, 1, true, fastTuning())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.leader().sh.SealSlots(ctx, 1, []uint32{0}, wire.SlotsPerShard, 1)
	var lag *fsm.FormatLagError
	if !errors.As(err, &lag) || lag.Need != 4 {
		t.Fatalf("seal at format 1: %v, want a FormatLagError for format 4", err)
	}
}
