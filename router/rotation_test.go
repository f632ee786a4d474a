package router

import (
	"testing"

	"github.com/raftq/raftq/shard"
	"github.com/raftq/raftq/wire"
)

// remoteTopo hosts no shard: every shard is led elsewhere.
type remoteTopo struct{ n uint32 }

func (t remoteTopo) NodeID() string                            { return "n1" }
func (t remoteTopo) ShardCount() uint32                        { return t.n }
func (t remoteTopo) SlotTable() wire.SlotTable                 { return wire.DefaultSlotTable(t.n) }
func (t remoteTopo) DedupPeers(string, uint32) []PriorOwner    { return nil }
func (t remoteTopo) LocalShard(uint32) *shard.Shard            { return nil }
func (t remoteTopo) ShardReplicas(uint32) []string             { return nil }
func (t remoteTopo) ShardLeader(uint32) (string, string, bool) { return "", "", false }
func (t remoteTopo) NoteLeader(uint32, string)                 {}
func (t remoteTopo) MemberGRPC(string) (string, bool)          { return "", false }
func (t remoteTopo) MemberPeer(string) (string, bool)          { return "", false }

// Every rotation lists each shard once, and over many calls every shard
// leads the list about equally often, whatever the shard count; with 4 or 8
// shards the plain-rotation calls used to always begin at shard 0.
func TestRotationVisitsEveryShardFirst(t *testing.T) {
	for _, n := range []uint32{1, 3, 4, 8} {
		r := New(remoteTopo{n: n}, Options{})
		first := make([]int, n)
		const calls = 800
		for range calls {
			ids := r.rotation()
			if len(ids) != int(n) {
				t.Fatalf("n=%d: rotation %v has %d ids", n, ids, len(ids))
			}
			seen := make(map[uint32]bool)
			for _, id := range ids {
				if id >= n || seen[id] {
					t.Fatalf("n=%d: rotation %v repeats or exceeds the shards", n, ids)
				}
				seen[id] = true
			}
			first[ids[0]]++
		}
		for id, c := range first {
			if want := calls / int(n); c < want/2 {
				t.Errorf("n=%d: shard %d came first %d times in %d calls, want about %d (%v)", n, id, c, calls, want, first)
			}
		}
	}
}

// The plain-rotation calls alone (one in four) also spread over shards:
// they are what drains shards led by nodes no consumer talks to.
func TestPlainRotationSpreadsWithShardCountDivisibleByFour(t *testing.T) {
	const n = 8
	r := New(remoteTopo{n: n}, Options{})
	first := make(map[uint32]int)
	for range 4 * 8 * n {
		start := r.next.Load() + 1 // what rotation's Add will return
		ids := r.rotation()
		if start%4 == 0 {
			first[ids[0]]++
		}
	}
	if len(first) != n {
		t.Fatalf("plain rotation began at %d distinct shards of %d: %v", len(first), n, first)
	}
}
