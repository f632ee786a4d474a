package systest

import (
	"errors"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/internal/testcluster"
	"github.com/raftq/raftq/wire"
)

// A message's own retry policy and its queue's dead retention hold across
// a kill -9 of the shard leader: the new leader dead-letters the message
// at its own max receive count (1, where the queue allows 5) and discards
// it when the dead retention runs out, counting it.
func TestJobs_RetryPolicyAndDeadRetentionAcrossLeaderKill(t *testing.T) {
	c := startCluster(t, testcluster.Options{})
	ctx := ctxT(t, 2*time.Minute)
	cl, err := client.Dial(ctx, c.Addrs())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const q = "retries"
	if _, err := cl.CreateQueue(ctx, q, client.QueueOptions{MaxReceives: 5, DeadRetention: 3 * time.Second}); err != nil {
		t.Fatalf("create queue: %v", err)
	}
	sent, err := cl.Send(ctx, q, []byte("job"), client.MaxAttempts(1))
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	mid, err := wire.ParseMessageID(sent.ID)
	if err != nil {
		t.Fatal(err)
	}
	victim := shardLeader(t, c, 0, mid.Shard)
	c.Kill(victim)
	t.Logf("killed n%d, leader of shard %d", victim+1, mid.Shard)

	var m *client.Message
	for m == nil && ctx.Err() == nil {
		ms, err := cl.Receive(ctx, q, client.ReceiveOptions{Max: 1, Wait: 5 * time.Second})
		if err == nil && len(ms) == 1 {
			m = ms[0]
		}
	}
	if m == nil || m.ID != sent.ID {
		t.Fatalf("received %v, want %s", m, sent.ID)
	}
	if err := cl.Nack(ctx, m.Receipt, client.NackOptions{ReadyNow: true, Error: "boom"}); err != nil {
		t.Fatalf("nack: %v", err)
	}
	info, err := cl.GetMessage(ctx, sent.ID)
	if err != nil || info.State != "dead" || info.MaxReceives != 1 {
		t.Fatalf("after one nack: %+v, %v; want dead at its own max of 1", info, err)
	}
	waitFor(t, ctx, "the dead retention to discard it", func() bool {
		_, err := cl.GetMessage(ctx, sent.ID)
		return errors.Is(err, client.ErrNotFound)
	})
	// Stats come from the answering node's replicas, which may trail.
	waitFor(t, ctx, "stats to count the discard", func() bool {
		st, err := cl.Stats(ctx, q)
		return err == nil && st.Dead == 0 && st.DeadExpired == 1
	})
}
