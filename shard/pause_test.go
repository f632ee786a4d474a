package shard

import (
	"context"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/fsmpb"
)

// A long poll on a paused queue waits without proposing anything, however
// many messages are ready, and wakes with them once the queue is resumed.
func TestPausedQueueLongPollWaitsForResume(t *testing.T) {
	c := newCluster(t, 3, true, fastTuning(), func(c *cluster) {
		c.nodeFormat = func(string) uint32 { return fsm.LogFormat }
	})
	leader := c.leader()
	p := standard(time.Minute)
	mustQueue(t, leader.sh, "q", p)
	paused := standard(time.Minute)
	paused.Paused = true
	mustQueue(t, leader.sh, "q", paused)
	enqueueN(t, leader.sh, "q", 3)

	before := leader.sh.ProposerStats().Commands
	res, err := leader.sh.Claim(context.Background(), &fsmpb.Receive{Queue: "q", Max: 10})
	if err != nil || res.GetStatus().GetCode() != fsmpb.Code_CODE_OK || len(res.GetReceive().GetMessages()) != 0 {
		t.Fatalf("receive on a paused queue = %v, %v; want empty", res, err)
	}
	type got struct {
		n   int
		err error
	}
	done := make(chan got, 1)
	go func() {
		res, err := pollClaim(context.Background(), leader.sh, &fsmpb.Receive{Queue: "q", Max: 10}, 30*time.Second)
		done <- got{len(res.GetReceive().GetMessages()), err}
	}()
	time.Sleep(500 * time.Millisecond)
	select {
	case g := <-done:
		t.Fatalf("a long poll on a paused queue returned %d message(s), %v", g.n, g.err)
	default:
	}
	// A tick may ride along; a receive per wake-up would be more.
	if n := leader.sh.ProposerStats().Commands - before; n > 1 {
		t.Fatalf("%d commands proposed for receives on a paused queue", n)
	}
	mustQueue(t, leader.sh, "q", p)
	select {
	case g := <-done:
		if g.err != nil || g.n != 3 {
			t.Fatalf("long poll after the resume got %d, %v; want 3", g.n, g.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the long poll did not wake at the resume")
	}
}
