package systest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/internal/testcluster"
)

// TestPauseSurvivesLeaderKill pauses a queue with the CLI, kills the
// shard leader with SIGKILL, and checks that under the new leader, and on
// the killed node once it is back, the queue still delivers nothing while
// taking sends; a long poll waiting on it wakes at the resume and the
// queue then delivers everything (docs/jobs.md). One shard, so every
// message is on the shard whose leader dies.
func TestPauseSurvivesLeaderKill(t *testing.T) {
	c := startCluster(t, testcluster.Options{Shards: 1})
	ctx := ctxT(t, 2*time.Minute)
	cl, err := client.Dial(ctx, c.Addrs(), client.WithCallTimeout(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cli := func(args ...string) string {
		t.Helper()
		out, err := runCLI(ctx, c.Addrs(), append([]string{"--insecure"}, args...)...)
		if err != nil {
			t.Fatalf("raftq %v: %v\n%s", args, err, out)
		}
		return out
	}
	if _, err := cl.CreateQueue(ctx, "held", client.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := cl.Send(ctx, "held", []byte("before")); err != nil {
			t.Fatal(err)
		}
	}
	if out := cli("queue", "pause", "held"); !strings.Contains(out, `paused queue "held"`) {
		t.Fatalf("queue pause: %s", out)
	}
	// nothing checks that receives through every node get nothing for a
	// while; a call the dying or electing cluster cannot serve is fine.
	nothing := func(what string, d time.Duration) {
		t.Helper()
		for end := time.Now().Add(d); time.Now().Before(end); {
			ms, err := cl.Receive(ctx, "held", client.ReceiveOptions{Max: 10, Wait: 300 * time.Millisecond})
			if len(ms) > 0 {
				t.Fatalf("%s: a paused queue delivered %d message(s)", what, len(ms))
			}
			if err != nil && !errors.Is(err, client.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s: receive: %v", what, err)
			}
		}
	}
	nothing("before the kill", time.Second)

	l := shardLeader(t, c, 0, 0)
	c.Kill(l)
	survivor := (l + 1) % len(c.Nodes)
	waitFor(t, ctx, "a new shard leader", func() bool {
		st, err := cl.Stats(ctx, "held")
		return err == nil && st.Ready == 5 && shardLeader(t, c, survivor, 0) != l
	})
	if _, err := cl.Send(ctx, "held", []byte("during")); err != nil {
		t.Fatalf("send to a paused queue under the new leader: %v", err)
	}
	nothing("under the new leader", 3*time.Second)
	st, err := cl.Stats(ctx, "held")
	if err != nil || !st.Paused || st.Ready != 6 || st.InFlight != 0 {
		t.Fatalf("stats under the new leader: %+v (%v); want paused, 6 ready, none in flight", st, err)
	}

	c.Restart(l)
	if err := c.WaitServing(ctx, l); err != nil {
		t.Fatal(err)
	}
	if out := cli("queue", "stats", "held", "--addr", c.Nodes[l].GRPC, "--json"); !strings.Contains(out, `"paused": true`) {
		t.Fatalf("stats through the restarted node: %s", out)
	}
	nothing("with the killed node back", 2*time.Second)

	// A long poll waiting on the paused queue wakes at the resume.
	got := make(chan int, 1)
	go func() {
		ms, _ := cl.Receive(ctx, "held", client.ReceiveOptions{Max: 10, Wait: 15 * time.Second})
		got <- len(ms)
	}()
	time.Sleep(500 * time.Millisecond)
	resumed := time.Now()
	cli("queue", "resume", "held")
	total := 0
	select {
	case total = <-got:
		if total == 0 {
			t.Fatal("the long poll ended empty after the resume")
		}
		if d := time.Since(resumed); d > 5*time.Second {
			t.Fatalf("the long poll woke %v after the resume", d)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the long poll did not return after the resume")
	}
	for total < 6 {
		ms, err := cl.Receive(ctx, "held", client.ReceiveOptions{Max: 10, Wait: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) == 0 {
			t.Fatalf("after the resume %d of the 6 messages were delivered", total)
		}
		total += len(ms)
	}
	if st, err := cl.Stats(ctx, "held"); err != nil || st.Paused {
		t.Fatalf("stats after resume: %+v (%v)", st, err)
	}
}
