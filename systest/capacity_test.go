package systest

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/internal/testcluster"
	"github.com/raftq/raftq/wire"
)

// A full queue refuses sends with RESOURCE_EXHAUSTED and a message naming
// the limit, still does after its shard leader is killed (the new leader's
// replica counts the same messages), and takes sends again once drained.
func TestCluster_FullQueueRefusesSendsAcrossFailover(t *testing.T) {
	c := startCluster(t, testcluster.Options{})
	const q = "capped"
	mustCreateQueue(t, c, q, &raftqv1.QueuePolicy{Mode: raftqv1.QueueMode_QUEUE_MODE_FIFO, MaxMessagesPerShard: 3, VisibilityTimeoutMs: 30_000})
	ctx := ctxT(t, 90*time.Second)
	const group = "g"
	shard := wire.ShardFor(q, group, 4)
	send := func(node int, body string) error {
		_, err := msgs(c, node).Send(ctx, &raftqv1.SendRequest{Queue: q, GroupId: group, DedupKey: body, Body: []byte(body)})
		return err
	}
	for _, b := range []string{"m1", "m2", "m3"} {
		if err := send(0, b); err != nil {
			t.Fatalf("send %s: %v", b, err)
		}
	}
	err := send(1, "m4")
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "max_messages_per_shard 3") {
		t.Fatalf("send to a full queue: %v, want RESOURCE_EXHAUSTED naming the limit", err)
	}
	batch, err := msgs(c, 2).SendBatch(ctx, &raftqv1.SendBatchRequest{Queue: q, Messages: []*raftqv1.SendRequest{
		{GroupId: group, DedupKey: "m1", Body: []byte("m1")}, // a retry of a message already in
		{GroupId: group, DedupKey: "m5", Body: []byte("m5")},
	}})
	if err != nil {
		t.Fatalf("send batch: %v", err)
	}
	if r := batch.GetResults(); r[0].GetCode() != 0 || !r[0].GetDeduplicated() || codes.Code(r[1].GetCode()) != codes.ResourceExhausted {
		t.Fatalf("batch results %v: want the retry deduplicated and the new message refused", r)
	}
	// Each node that answered a refusal counted it.
	for _, i := range []int{1, 2} {
		resp, err := http.Get("http://" + c.Nodes[i].HTTP + "/metrics")
		if err != nil {
			t.Fatalf("scrape %s: %v", c.Nodes[i].ID, err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if want := `raftq_messages_total{event="refused_full",queue="capped"} 1`; !strings.Contains(string(b), want) {
			t.Errorf("%s metrics lack %s", c.Nodes[i].ID, want)
		}
	}

	victim := shardLeader(t, c, 0, shard)
	c.Kill(victim)
	live := (victim + 1) % 3
	for {
		err = send(live, "m4")
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("send after failover: %v, want RESOURCE_EXHAUSTED", err)
	}

	got := drainOne(t, c, live, q)
	if got != "m1" {
		t.Fatalf("first message after failover %q, want m1", got)
	}
	if err := send(live, "m4"); err != nil {
		t.Fatalf("send after one ack: %v", err)
	}
	// Stats asks every shard; others the victim led may still be electing.
	st, err := queues(c, live).QueueStats(ctx, &raftqv1.QueueStatsRequest{Name: q})
	for status.Code(err) == codes.Unavailable && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
		st, err = queues(c, live).QueueStats(ctx, &raftqv1.QueueStatsRequest{Name: q})
	}
	if err != nil || st.GetReady() != 3 {
		t.Fatalf("stats %v %+v: want 3 ready (m2, m3, m4)", err, st)
	}
}

// drainOne receives one message from queue through node i, acks it and
// returns its body.
func drainOne(t *testing.T, c *testcluster.Cluster, i int, queue string) string {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	for {
		r, err := msgs(c, i).Receive(ctx, &raftqv1.ReceiveRequest{Queue: queue, MaxMessages: 1, WaitMs: 1000})
		if err == nil && len(r.GetMessages()) == 1 {
			m := r.GetMessages()[0]
			a, err := msgs(c, i).Ack(ctx, &raftqv1.AckRequest{Receipts: []string{m.GetReceipt()}})
			if err != nil || a.GetResults()[0].GetCode() != 0 {
				t.Fatalf("ack: %v %v", err, a.GetResults())
			}
			return string(m.GetBody())
		}
		if err != nil && status.Code(err) != codes.Unavailable {
			t.Fatalf("receive: %v", err)
		}
		if ctx.Err() != nil {
			t.Fatalf("no message in %s: %v", queue, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
