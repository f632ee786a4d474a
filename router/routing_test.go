package router

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/shard"
	"github.com/raftq/raftq/wire"
)

// shardSet is a fake topology of n shards, none led from elsewhere, of
// which this node hosts the replicas in local.
type shardSet struct {
	n     uint32
	local map[uint32]*shard.Shard
}

func (t shardSet) NodeID() string                            { return "n1" }
func (t shardSet) ShardCount() uint32                        { return t.n }
func (t shardSet) SlotTable() wire.SlotTable                 { return wire.DefaultSlotTable(t.n) }
func (t shardSet) DedupPeers(string, uint32) []PriorOwner    { return nil }
func (t shardSet) LocalShard(id uint32) *shard.Shard         { return t.local[id] }
func (t shardSet) ShardReplicas(uint32) []string             { return nil }
func (t shardSet) ShardLeader(uint32) (string, string, bool) { return "", "", false }
func (t shardSet) NoteLeader(uint32, string)                 {}
func (t shardSet) MemberGRPC(string) (string, bool)          { return "", false }
func (t shardSet) MemberPeer(string) (string, bool)          { return "", false }

// Grouped and dedup-keyed messages have a fixed shard: every node must
// route them alike, today and after an upgrade, or a group's order and a
// key's dedup window split over shards. The shards are pinned for 8
// shards; a change to the hash must fail here.
func TestShardForSendFixedShards(t *testing.T) {
	r := New(shardSet{n: 8}, Options{})
	for _, tc := range []struct {
		name                   string
		queue, group, dedupKey string
		want                   uint32
	}{
		{"group", "orders", "cust-1", "", 5},
		{"another group", "orders", "cust-2", "", 4},
		{"group wins over the dedup key", "orders", "cust-1", "k1", 5},
		{"dedup key", "orders", "", "k1", 1},
		{"another dedup key", "orders", "", "k2", 0},
		{"same group, other queue", "billing", "cust-1", "", 5},
		{"same key, other queue", "billing", "", "k1", 1},
	} {
		for range 3 { // the rotation of ungrouped sends must not move them
			got, err := r.ShardForSend(tc.queue, tc.group, tc.dedupKey)
			if err != nil || got != tc.want {
				t.Errorf("%s: ShardForSend(%q, %q, %q) = %d, %v; want %d", tc.name, tc.queue, tc.group, tc.dedupKey, got, err, tc.want)
			}
		}
	}
}

// Ungrouped messages with no key go round the shards when this node leads
// none: n sends visit each shard once.
func TestShardForSendRotatesUngrouped(t *testing.T) {
	for _, n := range []uint32{1, 3, 8} {
		r := New(shardSet{n: n}, Options{})
		for round := range 3 {
			seen := map[uint32]int{}
			for range n {
				id, err := r.ShardForSend("q", "", "")
				if err != nil {
					t.Fatal(err)
				}
				if id >= n {
					t.Fatalf("n=%d: shard %d out of range", n, id)
				}
				seen[id]++
			}
			if len(seen) != int(n) {
				t.Errorf("n=%d, round %d: %d sends went to %v, want each shard once", n, round, n, seen)
			}
		}
	}
}

// Without a shard map nothing is routed: a *NotReadyError, never shard 0.
func TestShardForSendNotReady(t *testing.T) {
	r := New(shardSet{n: 0}, Options{})
	for _, tc := range [][3]string{{"q", "", ""}, {"q", "g", ""}, {"q", "", "k"}} {
		_, err := r.ShardForSend(tc[0], tc[1], tc[2])
		var nr *NotReadyError
		if !errors.As(err, &nr) || !errors.Is(err, ErrNotReady) {
			t.Errorf("ShardForSend%v without a map: %v, want a *NotReadyError", tc, err)
		}
	}
}

// Ungrouped sends go to the shard this node leads, costing no forwarding
// hop; fixed ones still go to their own shard. The local replica is a real
// one-voter raft group.
func TestShardForSendPrefersTheLocalLeader(t *testing.T) {
	const n, led = 4, 2
	sh := openLoneShard(t, led)
	r := New(shardSet{n: n, local: map[uint32]*shard.Shard{led: sh}}, Options{})
	for range 2 * n {
		if id, err := r.ShardForSend("q", "", ""); err != nil || id != led {
			t.Fatalf("ungrouped send went to shard %d (%v), want the local leader's %d", id, err, led)
		}
	}
	if id, _ := r.ShardForSend("orders", "cust-1", ""); id != 1 {
		t.Errorf("grouped send with 4 shards went to %d, want its fixed shard 1", id)
	}
	for range n {
		ids := r.rotation()
		if ids[0] != led && r.next.Load()%4 != 0 {
			t.Errorf("rotation %v does not start at the local leader's shard %d", ids, led)
		}
	}
}

// openLoneShard starts shard id as a one-voter group on this node and
// waits for it to lead.
func openLoneShard(t *testing.T, id uint32) *shard.Shard {
	t.Helper()
	addr, tr := raft.NewInmemTransport("")
	sh, err := shard.Open(shard.Config{
		ID: id, NodeID: "n1", Dir: t.TempDir(), Transport: tr,
		Bootstrap:  []raft.Server{{Suffrage: raft.Voter, ID: "n1", Address: addr}},
		LeaseGrace: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = sh.Shutdown(ctx)
	})
	deadline := time.Now().Add(30 * time.Second)
	for !sh.IsLeader() {
		if time.Now().After(deadline) {
			t.Fatal("the one-voter shard did not lead")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return sh
}
