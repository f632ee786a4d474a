package shard

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/raftmux"
)

// A sidelined leader gives leadership away at once, refuses proposals with
// a raftgroup.NotLeaderError (certainly not applied), and never leads again until
// released; the group keeps committing meanwhile.
func TestSidelinedLeaderStepsAsideAndStaysAside(t *testing.T) {
	c := newCluster(t, 3, false, fastTuning())
	old := c.leader()
	mustQueue(t, old.sh, "q", standard(time.Minute))

	start := time.Now()
	old.sh.Sideline("clock-skew", raftmux.HoldCampaign)
	if got := old.sh.Sidelines(); len(got) != 1 || got[0] != "clock-skew" {
		t.Fatalf("Sidelines = %v", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_, err := old.sh.Propose(ctx, enqueueCmd("q", &fsmpb.NewMessage{Body: []byte("x")}))
	cancel()
	var nl *raftgroup.NotLeaderError
	if !errors.As(err, &nl) {
		t.Fatalf("propose on a sidelined replica: %v, want raftgroup.NotLeaderError", err)
	}

	var next *node
	for time.Since(start) < 10*time.Second {
		for _, nd := range c.followers(old) {
			if nd.sh.IsLeader() {
				next = nd
			}
		}
		if next != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if next == nil {
		t.Fatal("no other replica took over from the sidelined leader")
	}
	t.Logf("leadership moved %s -> %s in %v", old.id, next.id, time.Since(start))
	mustEnqueue(t, next.sh, "q", &fsmpb.NewMessage{Body: []byte("after")})

	// Depose the leader twice: the third replica must take over each
	// time, never the sidelined one.
	for range 2 {
		cur := c.leader()
		if cur == old {
			t.Fatalf("sidelined replica %s leads", old.id)
		}
		cur.sh.Sideline("test-depose", raftmux.HoldAll)
		deadline := time.Now().Add(10 * time.Second)
		var took *node
		for took == nil && time.Now().Before(deadline) {
			for _, nd := range c.live() {
				if nd != cur && nd.sh.IsLeader() {
					took = nd
				}
				if nd == old && nd.sh.Raft().State() == raft.Leader {
					t.Fatalf("sidelined replica %s became raft leader", old.id)
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		if took == nil {
			t.Fatalf("nobody took over from %s although a replica other than the sidelined %s could", cur.id, old.id)
		}
		cur.sh.Unsideline("test-depose")
	}

	old.sh.Unsideline("clock-skew")
	if len(old.sh.Sidelines()) != 0 || len(old.sh.Gate().Reasons()) != 0 {
		t.Fatalf("after release: sidelines %v gate %v", old.sh.Sidelines(), old.sh.Gate().Reasons())
	}
	cur := c.leader()
	if cur != old {
		if err := cur.sh.Raft().LeadershipTransferToServer(raft.ServerID(old.id), old.addr).Error(); err != nil {
			t.Fatalf("transfer to released replica: %v", err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for !old.sh.IsLeader() {
		if time.Now().After(deadline) {
			t.Fatalf("released replica %s did not lead after a transfer", old.id)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mustEnqueue(t, old.sh, "q", &fsmpb.NewMessage{Body: []byte("back")})
	c.converge()
}
