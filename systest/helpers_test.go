package systest

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/internal/testcluster"
)

func startCluster(t *testing.T, opts testcluster.Options) *testcluster.Cluster {
	t.Helper()
	return testcluster.Start(t, nodeBin, opts)
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func queues(c *testcluster.Cluster, i int) raftqv1.QueuesClient {
	return raftqv1.NewQueuesClient(c.Conn(i))
}

func msgs(c *testcluster.Cluster, i int) raftqv1.MessagesClient {
	return raftqv1.NewMessagesClient(c.Conn(i))
}

func mustCreateQueue(t *testing.T, c *testcluster.Cluster, name string, p *raftqv1.QueuePolicy) {
	t.Helper()
	createQueueVia(t, c, 0, name, p)
}

// mustCreateQueueVia creates name with the default policy through node i.
func mustCreateQueueVia(t *testing.T, c *testcluster.Cluster, i int, name string) {
	t.Helper()
	createQueueVia(t, c, i, name, nil)
}

func createQueueVia(t *testing.T, c *testcluster.Cluster, i int, name string, p *raftqv1.QueuePolicy) {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	for {
		_, err := queues(c, i).CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: name, Policy: p})
		if err == nil {
			return
		}
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			t.Fatalf("create queue %s: %v", name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// shardLeader returns the index of the node leading shard id, per node 0's view.
func shardLeader(t *testing.T, c *testcluster.Cluster, from int, id uint32) int {
	t.Helper()
	ctx := ctxT(t, 20*time.Second)
	for {
		st, err := raftqv1.NewClusterClient(c.Conn(from)).Status(ctx, &raftqv1.StatusRequest{})
		if err == nil {
			for _, s := range st.GetShards() {
				if s.GetShardId() != id || s.GetLeaderId() == "" {
					continue
				}
				for i, n := range c.Nodes {
					if n.ID == s.GetLeaderId() {
						return i
					}
				}
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("no leader for shard %d: %v", id, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// drain receives and acks everything from queue through node i until
// `empties` consecutive empty long polls, returning bodies in order.
func drain(t *testing.T, c *testcluster.Cluster, i int, queue string, empties int) []string {
	t.Helper()
	ctx := ctxT(t, 2*time.Minute)
	var out []string
	empty := 0
	for empty < empties {
		resp, err := msgs(c, i).Receive(ctx, &raftqv1.ReceiveRequest{Queue: queue, MaxMessages: 100, WaitMs: 500})
		if err != nil {
			if status.Code(err) == codes.Unavailable && ctx.Err() == nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			t.Fatalf("drain receive: %v", err)
		}
		if len(resp.GetMessages()) == 0 {
			empty++
			continue
		}
		empty = 0
		var receipts []string
		for _, m := range resp.GetMessages() {
			out = append(out, string(m.GetBody()))
			receipts = append(receipts, m.GetReceipt())
		}
		ack, err := msgs(c, i).Ack(ctx, &raftqv1.AckRequest{Receipts: receipts})
		if err != nil {
			t.Fatalf("drain ack: %v", err)
		}
		for k, r := range ack.GetResults() {
			if r.GetCode() != 0 {
				t.Fatalf("drain ack %d: code %d %s", k, r.GetCode(), r.GetError())
			}
		}
	}
	return out
}
