package systest

import (
	"context"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/internal/testcluster"
	"github.com/raftq/raftq/wire"
)

// A caller waiting on a job (client.Wait) gets its result although the
// job's shard leader is killed (-9) while it waits and the job is leased
// and acked under the next leader; the result stays on the acked record
// through a second leader kill.
func TestCluster_JobResultWaitAcrossLeaderKill(t *testing.T) {
	c := startCluster(t, testcluster.Options{})
	ctx := ctxT(t, 90*time.Second)
	cl, err := client.Dial(ctx, c.Addrs())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	const q = "jobs"
	mustCreateQueue(t, c, q, nil)
	sent, err := cl.Send(ctx, q, []byte("resize cat.png"))
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	id, err := wire.ParseMessageID(sent.ID)
	if err != nil {
		t.Fatalf("message id %q: %v", sent.ID, err)
	}

	type waited struct {
		m   *client.MessageInfo
		err error
	}
	done := make(chan waited, 1)
	go func() {
		m, err := cl.Wait(ctx, q, sent.ID)
		done <- waited{m, err}
	}()
	time.Sleep(300 * time.Millisecond) // the waiter is polling the leader about to die

	victim := shardLeader(t, c, 0, id.Shard)
	c.Kill(victim)
	select {
	case w := <-done:
		t.Fatalf("Wait returned before the job ran: %+v, %v", w.m, w.err)
	default:
	}

	const result = "thumb.png 64x64"
	var receipt string
	for receipt == "" {
		ms, err := cl.Receive(ctx, q, client.ReceiveOptions{Max: 1, Wait: time.Second})
		if err != nil && ctx.Err() != nil {
			t.Fatalf("receive after failover: %v", err)
		}
		if len(ms) == 1 {
			receipt = ms[0].Receipt
		}
	}
	if err := cl.AckWithResult(ctx, receipt, []byte(result)); err != nil {
		t.Fatalf("ack with result after failover: %v", err)
	}
	w := <-done
	if w.err != nil || w.m.State != "acked" || string(w.m.Result) != result {
		t.Fatalf("Wait across the leader kill = %+v, %v; want acked with %q", w.m, w.err, result)
	}

	// Bring the first victim back, then kill the shard's new leader: the
	// third leader still holds the result.
	c.Restart(victim)
	if err := c.WaitServing(ctx, victim); err != nil {
		t.Fatalf("restart %s: %v", c.Nodes[victim].ID, err)
	}
	second := shardLeader(t, c, victim, id.Shard)
	waitResult(t, cl, sent.ID, result)
	c.Kill(second)
	m := waitResult(t, cl, sent.ID, result)
	if len(m.History) != 1 || m.History[0].Outcome != "acked" {
		t.Fatalf("history after the second kill: %+v", m.History)
	}
}

// waitResult reads the message until it answers acked with result,
// riding out elections.
func waitResult(t *testing.T, cl *client.Client, id, result string) *client.MessageInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		m, err := cl.Wait(ctx, "jobs", id)
		if err == nil && m.State == "acked" && string(m.Result) == result {
			return m
		}
		if ctx.Err() != nil {
			t.Fatalf("message %s: %+v, %v; want acked with %q", id, m, err, result)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
