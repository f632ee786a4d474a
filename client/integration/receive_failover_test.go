package integration

import (
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/internal/testcluster"
)

// The client sends receives to the shard leader. A long poll waiting there
// when the leader is killed must move on to the surviving nodes and still
// get a message sent after the kill, not fail or come back empty.
func TestClient_LongPollAtKilledLeaderMovesOn(t *testing.T) {
	c := testcluster.Start(t, nodeBin, testcluster.Options{Shards: 1})
	cl := mustDial(t, c, client.WithCallTimeout(3*time.Second))
	ctx := ctxT(t, time.Minute)
	if _, err := cl.CreateQueue(ctx, "lp", client.QueueOptions{}); err != nil {
		t.Fatalf("CreateQueue: %v", err)
	}
	victim := shardLeaderIndex(t, c, cl, 0)

	type result struct {
		msgs []*client.Message
		err  error
	}
	got := make(chan result, 1)
	go func() {
		ms, err := cl.Receive(ctx, "lp", client.ReceiveOptions{Max: 1, Wait: 15 * time.Second})
		got <- result{ms, err}
	}()
	time.Sleep(500 * time.Millisecond) // the long poll is waiting at the leader
	c.Kill(victim)

	if _, err := cl.Send(ctx, "lp", []byte("after the kill")); err != nil {
		t.Fatalf("Send after the kill: %v", err)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("Receive across the kill: %v", r.err)
		}
		if len(r.msgs) != 1 || string(r.msgs[0].Body) != "after the kill" {
			t.Fatalf("Receive across the kill got %d messages, want the one sent after it", len(r.msgs))
		}
	case <-ctx.Done():
		t.Fatal("Receive across the kill did not return")
	}
}
