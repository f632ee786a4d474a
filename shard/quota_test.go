package shard

import (
	"testing"
	"time"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/fsmpb"
)

// A leader answers a send to a queue at its limit on live messages without
// a raft round, each item refused as Apply would refuse it; a send with a
// dedup key still goes to Apply, which answers a retry of a message
// already in as deduplicated.
func TestLeaderRefusesFullQueueWithoutARound(t *testing.T) {
	c := newCluster(t, 3, true, fastTuning(), func(c *cluster) {
		c.nodeFormat = func(string) uint32 { return fsm.LogFormat }
	})
	l := c.leaderWithin(10 * time.Second).sh
	mustQueue(t, l, "acme/q", &fsmpb.QueuePolicy{ShardQuota: &fsmpb.ShardQuota{MaxMessages: 2}})
	mustEnqueue(t, l, "acme/q", &fsmpb.NewMessage{Body: []byte("a"), DedupKey: "a"})
	mustEnqueue(t, l, "acme/q", &fsmpb.NewMessage{Body: []byte("b")})
	before := l.Raft().LastIndex()
	res := mustPropose(t, l, enqueueCmd("acme/q", &fsmpb.NewMessage{Body: []byte("c")}, &fsmpb.NewMessage{Body: []byte("d")}))
	for i, it := range res.GetEnqueue().GetItems() {
		if it.GetStatus().GetCode() != fsmpb.Code_CODE_RESOURCE_EXHAUSTED {
			t.Fatalf("item %d: %v", i, it.GetStatus())
		}
	}
	if after := l.Raft().LastIndex(); after != before {
		t.Fatalf("the refused send took a raft round: last index %d -> %d", before, after)
	}
	res = mustPropose(t, l, enqueueCmd("acme/q", &fsmpb.NewMessage{Body: []byte("a"), DedupKey: "a"}))
	if it := res.GetEnqueue().GetItems()[0]; !it.GetDeduplicated() {
		t.Fatalf("a retry of a message already in, at the limit: %v", it)
	}
}
