package integration

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/internal/testcluster"
)

// TestClient_TopicFansOutOverShards publishes to a FIFO topic of a
// 4-shard cluster and reads every subscription back in group order.
func TestClient_TopicFansOutOverShards(t *testing.T) {
	c := testcluster.Start(t, nodeBin, testcluster.Options{})
	cl := mustDial(t, c)
	ctx := ctxT(t, 2*time.Minute)
	if _, err := cl.CreateTopic(ctx, "orders", client.TopicOptions{FIFO: true, Retention: time.Hour}); err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	if _, err := cl.Subscribe(ctx, "orders", "billing", client.SubscriptionOptions{}); err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	if _, err := cl.Subscribe(ctx, "orders", "placed", client.SubscriptionOptions{Filter: "type = order.placed"}); err != nil {
		t.Fatalf("Subscribe filtered: %v", err)
	}
	const groups, per = 12, 5
	wantPlaced := 0
	for i := range per {
		for g := range groups {
			typ := "order.paid"
			if (g+i)%2 == 0 {
				typ, wantPlaced = "order.placed", wantPlaced+1
			}
			r, err := cl.Publish(ctx, "orders", []byte(fmt.Sprintf("g%d-%d", g, i)), client.Group(fmt.Sprint("g", g)), client.Type(typ))
			if err != nil {
				t.Fatalf("Publish: %v", err)
			}
			want := uint32(1)
			if typ == "order.placed" {
				want = 2
			}
			if r.Deliveries != want {
				t.Fatalf("publish of %s delivered to %d subscriptions, want %d", typ, r.Deliveries, want)
			}
		}
	}
	drain := func(q string, want int) {
		t.Helper()
		next := map[string]int{}
		got := 0
		for deadline := time.Now().Add(time.Minute); got < want && time.Now().Before(deadline); {
			ms, err := cl.Receive(ctx, q, client.ReceiveOptions{Max: 32, Wait: time.Second})
			if err != nil {
				t.Fatalf("Receive %s: %v", q, err)
			}
			var rs []string
			for _, m := range ms {
				var g, i int
				if _, err := fmt.Sscanf(string(m.Body), "g%d-%d", &g, &i); err != nil {
					t.Fatalf("%s: body %q", q, m.Body)
				}
				if i < next[m.Group] {
					t.Fatalf("%s: %s after message %d of its group", q, m.Body, next[m.Group])
				}
				next[m.Group] = i + 1
				rs = append(rs, m.Receipt)
			}
			if len(rs) > 0 {
				if err := cl.AckBatch(ctx, rs); err != nil {
					t.Fatalf("Ack %s: %v", q, err)
				}
			}
			got += len(ms)
		}
		if got != want {
			t.Fatalf("%s: received %d, want %d", q, got, want)
		}
	}
	drain("billing", groups*per)
	drain("placed", wantPlaced)

	// A subscription created later replays what the topic retains.
	if _, err := cl.Subscribe(ctx, "orders", "audit", client.SubscriptionOptions{From: client.ReplayEarliest}); err != nil {
		t.Fatalf("Subscribe with replay: %v", err)
	}
	drain("audit", groups*per)

	var ce *client.Error
	if _, err := cl.Receive(ctx, "orders", client.ReceiveOptions{Max: 1}); !errors.As(err, &ce) || !strings.Contains(err.Error(), "is a topic") {
		t.Fatalf("Receive from a topic: %v", err)
	}
	if err := cl.DeleteTopic(ctx, "orders"); err == nil || !strings.Contains(err.Error(), "delete them first") {
		t.Fatalf("DeleteTopic with subscriptions: %v", err)
	}
	if _, err := cl.CreateQueue(ctx, "plain", client.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Subscribe(ctx, "plain", "x", client.SubscriptionOptions{}); err == nil {
		t.Fatal("subscribed to a queue")
	}
	if _, err := cl.CreateQueue(ctx, "std", client.QueueOptions{SubscriptionOf: "orders"}); err == nil || !strings.Contains(err.Error(), "mode of topic") {
		t.Fatalf("standard subscription of a FIFO topic: %v", err)
	}
	if _, err := cl.Subscribe(ctx, "orders", "bad", client.SubscriptionOptions{Filter: "colour = red"}); err == nil || !strings.Contains(err.Error(), "unknown field") {
		t.Fatalf("bad filter: %v", err)
	}
	// The CLI changes a filter and a topic's retention in place.
	addr := strings.Join(c.Addrs(), ",")
	cli := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(cliBin, append([]string{"--addr", addr, "--timeout", "15s"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("raftq %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	cli("topic", "filter", "placed", "type = order.paid")
	if q, err := cl.GetQueue(ctx, "placed"); err != nil || q.Options.Filter != "type = order.paid" {
		t.Fatalf("after topic filter: %+v %v", q.Options, err)
	}
	if r, err := cl.Publish(ctx, "orders", []byte("g99-0"), client.Group("g99"), client.Type("order.paid")); err != nil || r.Deliveries != 3 {
		t.Fatalf("publish under the new filter: %+v %v", r, err)
	}
	cli("topic", "update", "orders", "--retention", "0s")
	if st, err := cl.Stats(ctx, "orders"); err != nil || st.Retained != 0 {
		t.Fatalf("retention 0 keeps %d publications (%v)", st.Retained, err)
	}
	if out, err := exec.Command(cliBin, "--addr", addr, "topic", "filter", "orders", "type = x").CombinedOutput(); err == nil || !strings.Contains(string(out), "not a subscription") {
		t.Fatalf("topic filter on a topic: %v %s", err, out)
	}
	drain("billing", 1)
	drain("placed", 1)
	drain("audit", 1)

	topics, err := cl.ListTopics(ctx)
	if err != nil || len(topics) != 1 || len(topics[0].Subscriptions) != 3 {
		t.Fatalf("ListTopics = %+v, %v", topics, err)
	}
	for _, q := range []string{"audit", "billing", "placed"} {
		if err := cl.DeleteQueue(ctx, q); err != nil {
			t.Fatalf("delete %s: %v", q, err)
		}
	}
	if err := cl.DeleteTopic(ctx, "orders"); err != nil {
		t.Fatalf("DeleteTopic: %v", err)
	}
}
