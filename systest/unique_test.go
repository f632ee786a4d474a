package systest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/internal/testcluster"
	"github.com/raftq/raftq/wire"
)

// Unique jobs on real nodes: many concurrent senders of one key, through
// every node, in a standard and a FIFO queue, create exactly one job; the
// key still holds after the shard leader is killed with -9, and is free
// once the new leader acks the job.
func TestUniqueJobs(t *testing.T) {
	c := startCluster(t, testcluster.Options{})
	mustCreateQueue(t, c, "jobs", nil)
	mustCreateQueue(t, c, "fifo", &raftqv1.QueuePolicy{Mode: raftqv1.QueueMode_QUEUE_MODE_FIFO})
	ctx := ctxT(t, 2*time.Minute)

	for _, q := range []string{"jobs", "fifo"} {
		req := &raftqv1.SendRequest{Queue: q, DedupKey: "report-7", UniqueUntilDone: true, Body: []byte("build report 7")}
		if q == "fifo" {
			req.GroupId = "customer-7"
		}
		ids, fresh := sendConcurrently(t, ctx, c, req, 48)
		if len(ids) != 1 || fresh != 1 {
			t.Fatalf("%s: 48 concurrent unique sends made ids %v, %d not deduplicated; want one job", q, ids, fresh)
		}
	}

	// The key survives the loss of the shard leader that took it.
	req := &raftqv1.SendRequest{Queue: "jobs", DedupKey: "report-7", UniqueUntilDone: true, Body: []byte("again")}
	first := sendRetrying(t, ctx, c, 0, req)
	id, err := wire.ParseMessageID(first.GetMessageId())
	if err != nil {
		t.Fatal(err)
	}
	victim := shardLeader(t, c, 0, id.Shard)
	c.Kill(victim)
	live := (victim + 1) % len(c.Nodes)
	if again := sendRetrying(t, ctx, c, live, req); !again.GetDeduplicated() || again.GetMessageId() != first.GetMessageId() {
		t.Fatalf("after the shard leader's kill: %v, want a dedup hit on %s", again, first.GetMessageId())
	}
	got := drain(t, c, live, "jobs", 2)
	if len(got) != 1 || got[0] != "build report 7" {
		t.Fatalf("drained %q, want the one job", got)
	}
	next := sendRetrying(t, ctx, c, live, req)
	if next.GetDeduplicated() || next.GetMessageId() == first.GetMessageId() {
		t.Fatalf("send after the job was acked: %v, want a new job", next)
	}
	info, err := msgs(c, live).GetMessage(ctx, &raftqv1.GetMessageRequest{MessageId: next.GetMessageId()})
	if err != nil || !info.GetMessage().GetUniqueUntilDone() {
		t.Fatalf("get message %s: %v %v, want it marked unique until done", next.GetMessageId(), info, err)
	}
}

// sendConcurrently sends req n times at once, spread over every node, and
// returns the distinct ids answered and how many answers were not
// deduplicated.
func sendConcurrently(t *testing.T, ctx context.Context, c *testcluster.Cluster, req *raftqv1.SendRequest, n int) (map[string]bool, int) {
	t.Helper()
	var (
		mu    sync.Mutex
		ids   = map[string]bool{}
		fresh int
		wg    sync.WaitGroup
		errs  = make(chan error, n)
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := sendUntil(ctx, c, i%len(c.Nodes), req)
			if err != nil {
				errs <- fmt.Errorf("sender %d: %w", i, err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			ids[resp.GetMessageId()] = true
			if !resp.GetDeduplicated() {
				fresh++
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return ids, fresh
}

func sendRetrying(t *testing.T, ctx context.Context, c *testcluster.Cluster, i int, req *raftqv1.SendRequest) *raftqv1.SendResponse {
	t.Helper()
	resp, err := sendUntil(ctx, c, i, req)
	if err != nil {
		t.Fatalf("send via %s: %v", c.Nodes[i].ID, err)
	}
	return resp
}

// sendUntil sends through node i, again while the answer is UNAVAILABLE
// (an election): the key makes the repeat safe.
func sendUntil(ctx context.Context, c *testcluster.Cluster, i int, req *raftqv1.SendRequest) (*raftqv1.SendResponse, error) {
	for {
		resp, err := msgs(c, i).Send(ctx, req)
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			return resp, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
