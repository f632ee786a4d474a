package systest

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/internal/testcluster"
)

// A redrive of a DLQ to another queue, run through the node leading shard
// 0, is cut by a kill -9 of that node partway and run again through a
// survivor: every dead message ends in the target exactly once and none
// stays dead (docs/jobs.md, "Dead letters").
func TestRedriveToQueueAcrossLeaderKill(t *testing.T) {
	c := startCluster(t, testcluster.Options{Shards: 2})
	const n = 60
	mustCreateQueue(t, c, "jobs", &raftqv1.QueuePolicy{MaxReceiveCount: 1})
	mustCreateQueue(t, c, "jobs-retry", nil)
	ctx := ctxT(t, 50*time.Second)

	for i := range n {
		typ := []string{"email", "sms"}[i%2]
		if _, err := msgs(c, 0).Send(ctx, &raftqv1.SendRequest{Queue: "jobs", Body: []byte(fmt.Sprint("m", i)), Type: typ}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	killed := 0
	for killed < n {
		resp, err := msgs(c, 0).Receive(ctx, &raftqv1.ReceiveRequest{Queue: "jobs", MaxMessages: 100, WaitMs: 500})
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		for _, m := range resp.GetMessages() {
			if _, err := msgs(c, 0).DeadLetter(ctx, &raftqv1.DeadLetterRequest{Receipt: m.GetReceipt(), Error: "smtp 451 for " + string(m.GetBody())}); err != nil {
				t.Fatalf("dead-letter: %v", err)
			}
			killed++
		}
	}
	dl := raftqv1.NewDeadLettersClient
	dry, err := dl(c.Conn(0)).Redrive(ctx, &raftqv1.RedriveRequest{Queue: "jobs", TargetQueue: "jobs-retry", DryRun: true,
		Filter: &raftqv1.DeadFilter{Type: "email", ErrorContains: "smtp 451"}})
	if err != nil {
		t.Fatalf("dry run: %v", err)
	}
	if dry.GetMatched() != n/2 || len(dry.GetWouldMove()) != n/2 || dry.GetRedriven() != 0 {
		t.Fatalf("dry run matched %d, listed %d, moved %d; want %d, %d, 0", dry.GetMatched(), len(dry.GetWouldMove()), dry.GetRedriven(), n/2, n/2)
	}

	victim := shardLeader(t, c, 0, 0)
	first := make(chan error, 1)
	go func() {
		_, err := dl(c.Conn(victim)).Redrive(ctx, &raftqv1.RedriveRequest{Queue: "jobs", TargetQueue: "jobs-retry", RatePerS: 20})
		first <- err
	}()
	time.Sleep(1200 * time.Millisecond) // about a third moved at 20/s
	c.Kill(victim)
	if err := <-first; err == nil {
		t.Fatal("the redrive on the killed node finished before the kill: the test proves nothing")
	}
	live := (victim + 1) % len(c.Nodes)
	for {
		_, err := dl(c.Conn(live)).Redrive(ctx, &raftqv1.RedriveRequest{Queue: "jobs", TargetQueue: "jobs-retry", RatePerS: 500})
		if err == nil {
			break
		}
		if code := status.Code(err); (code != codes.Unavailable && code != codes.DeadlineExceeded) || ctx.Err() != nil {
			t.Fatalf("redrive again through %s: %v", c.Nodes[live].ID, err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	left, err := dl(c.Conn(live)).ListDead(ctx, &raftqv1.ListDeadRequest{Queue: "jobs"})
	if err != nil || len(left.GetMessages()) != 0 {
		t.Fatalf("dead after the redrive: %d, %v", len(left.GetMessages()), err)
	}
	seen := map[string]int{}
	for _, b := range drain(t, c, live, "jobs-retry", 3) {
		seen[b]++
	}
	for i := range n {
		if b := fmt.Sprint("m", i); seen[b] != 1 {
			t.Errorf("%s in the target %d times, want once", b, seen[b])
		}
	}
	if len(seen) != n {
		t.Errorf("target held %d distinct bodies, want %d", len(seen), n)
	}
}
