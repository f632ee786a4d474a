package systest

import (
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/internal/testcluster"
	"github.com/raftq/raftq/wire"
)

// A job on its only allowed receive is handed back twice without using an
// attempt (a release, then a snooze), across a kill -9 of its shard's
// leader: the new leader must hold the given-back receive count, or the
// job would be dead-lettered, and the restarted replica must agree.
func TestJobs_SnoozeKeepsAttemptsAcrossLeaderKill(t *testing.T) {
	c := startCluster(t, testcluster.Options{})
	ctx := ctxT(t, 2*time.Minute)
	cl, err := client.Dial(ctx, c.Addrs())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.CreateQueue(ctx, "snooze", client.QueueOptions{MaxReceives: 1, Visibility: 30 * time.Second}); err != nil {
		t.Fatalf("create queue: %v", err)
	}
	sent, err := cl.Send(ctx, "snooze", []byte("job"))
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	mid, err := wire.ParseMessageID(sent.ID)
	if err != nil {
		t.Fatal(err)
	}
	receiveOne := func(step string) *client.Message {
		t.Helper()
		for ctx.Err() == nil {
			ms, err := cl.Receive(ctx, "snooze", client.ReceiveOptions{Max: 1, Wait: 5 * time.Second, Consumer: "systest"})
			if err == nil && len(ms) == 1 {
				if ms[0].ID != sent.ID || ms[0].ReceiveCount != 1 {
					t.Fatalf("%s: received %s on receive %d, want %s on receive 1", step, ms[0].ID, ms[0].ReceiveCount, sent.ID)
				}
				return ms[0]
			}
			if err != nil {
				t.Logf("%s: receive: %v", step, err)
				time.Sleep(200 * time.Millisecond)
			}
		}
		t.Fatalf("%s: no delivery of %s", step, sent.ID)
		return nil
	}

	m := receiveOne("first delivery")
	if err := cl.Snooze(ctx, m.Receipt, client.SnoozeOptions{Reason: "worker shut down"}); err != nil {
		t.Fatalf("release: %v", err)
	}
	victim := shardLeader(t, c, 0, mid.Shard)
	c.Kill(victim)
	t.Logf("killed n%d, leader of shard %d, after the release", victim+1, mid.Shard)

	// The release was committed before the kill: the new leader hands the
	// job out again on its first (and only allowed) receive.
	m = receiveOne("after the kill")
	if err := cl.Snooze(ctx, m.Receipt, client.SnoozeOptions{Delay: 2 * time.Second, Reason: "snoozed"}); err != nil {
		t.Fatalf("snooze on the new leader: %v", err)
	}
	info, err := cl.GetMessage(ctx, sent.ID)
	if err != nil {
		t.Fatalf("get message: %v", err)
	}
	if info.State != "delayed" || info.ReceiveCount != 0 {
		t.Fatalf("after the snooze: state %s receive count %d, want delayed and 0", info.State, info.ReceiveCount)
	}
	m = receiveOne("after the snooze")
	if err := cl.Ack(ctx, m.Receipt); err != nil {
		t.Fatalf("ack: %v", err)
	}
	info, err = cl.GetMessage(ctx, sent.ID)
	if err != nil {
		t.Fatalf("get message: %v", err)
	}
	var outcomes []string
	for _, a := range info.History {
		outcomes = append(outcomes, a.Outcome)
	}
	if info.State != "acked" || len(outcomes) != 3 || outcomes[0] != "snoozed" || outcomes[1] != "snoozed" {
		t.Fatalf("finished as %s with history %v, want acked after two snoozed attempts", info.State, outcomes)
	}

	// The killed replica comes back from its disk and reaches the same state.
	c.Restart(victim)
	if err := c.WaitServing(ctx, victim); err != nil {
		t.Fatalf("restart: %v", err)
	}
	waitCaughtUp(t, c, victim)
	waitSameDigests(t, c, 4)
}
