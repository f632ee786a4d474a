package systest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/internal/testcluster"
	"github.com/raftq/raftq/wire"
	"github.com/raftq/raftq/worker"
)

// fanPub is one publication the cluster acknowledged: its body is unique,
// so each subscription's copy is found by it.
type fanPub struct {
	group, body string
	eu          bool // attr.region = eu-west: the filtered subscription's
}

// fanBook records acknowledged publications in each group's publish order.
type fanBook struct {
	mu     sync.Mutex
	groups map[string][]fanPub
}

func (b *fanBook) add(p fanPub) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.groups[p.group] = append(b.groups[p.group], p)
}

// want is each group's bodies in publish order that pass keep.
func (b *fanBook) want(keep func(fanPub) bool) map[string][]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string][]string{}
	for g, ps := range b.groups {
		for _, p := range ps {
			if keep(p) {
				out[g] = append(out[g], p.body)
			}
		}
	}
	return out
}

func countBodies(m map[string][]string) int {
	n := 0
	for _, bs := range m {
		n += len(bs)
	}
	return n
}

// checkDeliveries fails t unless got (each group's bodies in delivery
// order) is exactly want: every body once, in publish order.
func checkDeliveries(t *testing.T, sub string, want, got map[string][]string) {
	t.Helper()
	for g, w := range want {
		if strings.Join(got[g], " ") != strings.Join(w, " ") {
			t.Errorf("%s, group %s: got %d message(s) %v\nwant %d in publish order %v", sub, g, len(got[g]), got[g], len(w), w)
		}
	}
	for g, bs := range got {
		if _, ok := want[g]; !ok {
			t.Errorf("%s: group %s was not to reach it, got %v", sub, g, bs)
		}
	}
}

// TestTopics_FanOutEndToEnd drives topics through the CLI binary, the Go
// client and the worker on a real 3-node cluster of 2 shards
// (docs/topics.md): a FIFO topic with retention and three subscriptions,
// one filtered; publishes through the CLI and the client, deduplicated at
// the topic; kill -9 of a shard leader in the middle of publishing; then
// every subscription holds exactly what it should in each group's order,
// a message dead-lettered on one subscription is untouched on the others,
// a subscription created afterwards with --from earliest replays what the
// topic retains, and a topic with subscriptions cannot be deleted.
func TestTopics_FanOutEndToEnd(t *testing.T) {
	const shards = 2
	c := startCluster(t, testcluster.Options{Shards: shards})
	ctx := ctxT(t, 3*time.Minute)
	cl, err := client.Dial(ctx, c.Addrs(), client.WithCallTimeout(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cli := func(args ...string) (string, error) {
		return runCLI(ctx, c.Addrs(), append([]string{"--insecure"}, args...)...)
	}
	mustCLI := func(args ...string) string {
		t.Helper()
		out, err := cli(args...)
		if err != nil {
			t.Fatalf("raftq %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}

	// Two groups on each shard, so the kill below hits half the groups.
	var groups []string
	per := map[uint32]int{}
	for i := 0; len(groups) < 4; i++ {
		g := fmt.Sprintf("g%d", i)
		if s := wire.ShardFor("orders", g, shards); per[s] < 2 {
			per[s]++
			groups = append(groups, g)
		}
	}

	// --- the topic and its subscriptions: CLI and client.
	out := mustCLI("topic", "create", "orders", "--fifo", "--retention", "10m", "--dedup-window", "2m")
	for _, want := range []string{"mode", "fifo", "retention", "10m0s"} {
		if !strings.Contains(out, want) {
			t.Fatalf("topic create printed:\n%s", out)
		}
	}
	mustCLI("topic", "subscribe", "orders", "orders-billing", "--visibility", "5s", "--max-receives", "3")
	mustCLI("topic", "subscribe", "orders", "orders-eu", "--filter", "attr.region ^= eu- and exists(attr.region)", "--visibility", "5s")
	if _, err := cl.Subscribe(ctx, "orders", "orders-ship", client.SubscriptionOptions{Delivery: client.QueueOptions{Visibility: 5 * time.Second}}); err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	if q, err := cl.GetQueue(ctx, "orders-ship"); err != nil || !q.Options.FIFO || q.Options.SubscriptionOf != "orders" {
		t.Fatalf("orders-ship: %+v, %v; want a FIFO subscription of orders", q, err)
	}
	// Nothing consumes a topic itself.
	var ce *client.Error
	if _, err := cl.Receive(ctx, "orders", client.ReceiveOptions{Max: 1}); !errors.As(err, &ce) || ce.Code != codes.FailedPrecondition {
		t.Fatalf("a receive from the topic itself: %v; want FAILED_PRECONDITION", err)
	}

	book := &fanBook{groups: map[string][]fanPub{}}
	var retries atomic.Int64 // publishes tried again after an error
	// publish publishes one message of group g until the cluster
	// acknowledges it, with a dedup key so a retry of a publish whose
	// outcome was unknown cannot fan it out twice; viaCLI uses the binary.
	publish := func(g string, seq int, viaCLI bool) error {
		p := fanPub{group: g, body: fmt.Sprintf("%s-%03d", g, seq), eu: seq%2 == 0}
		region := "us-east"
		if p.eu {
			region = "eu-west"
		}
		key := "k-" + p.body
		wantDeliveries := uint32(2)
		if p.eu {
			wantDeliveries = 3
		}
		for attempt := 0; ; attempt++ {
			var r client.SendResult
			var err error
			if viaCLI {
				var out string
				out, err = cli("topic", "publish", "orders", p.body, "--group", g, "--dedup", key, "--attr", "region="+region, "--type", "order.placed", "--json")
				if err == nil {
					var js struct {
						ID           string `json:"id"`
						Deduplicated bool   `json:"deduplicated"`
						Deliveries   uint32 `json:"deliveries"`
					}
					if err = json.Unmarshal([]byte(out), &js); err != nil {
						return fmt.Errorf("topic publish --json printed %q: %w", out, err)
					}
					r = client.SendResult{ID: js.ID, Deduplicated: js.Deduplicated, Deliveries: js.Deliveries}
				} else {
					err = fmt.Errorf("%w: %s", err, strings.TrimSpace(out))
				}
			} else {
				r, err = cl.Publish(ctx, "orders", []byte(p.body), client.Group(g), client.DedupKey(key),
					client.Attributes(map[string]string{"region": region}), client.Type("order.placed"))
			}
			if err == nil {
				// A retry after an unknown outcome, ours or the client's
				// own, may find its first try committed: deduplicated, with
				// no new deliveries.
				if !r.Deduplicated && r.Deliveries != wantDeliveries {
					return fmt.Errorf("publish %s: %d deliveries, want %d", p.body, r.Deliveries, wantDeliveries)
				}
				book.add(p)
				return nil
			}
			retries.Add(1)
			if ctx.Err() != nil || attempt == 200 {
				return fmt.Errorf("publish %s never acknowledged: %w", p.body, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// --- publishes through the CLI and the client, interleaved in groups.
	for seq := 1; seq <= 4; seq++ {
		for _, g := range groups {
			if err := publish(g, seq, seq <= 2 && g == groups[0]); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A message with no region attribute passes no exists(attr.region).
	r, err := cl.Publish(ctx, "orders", []byte("plain-001"), client.Group("plain"), client.DedupKey("k-plain-001"))
	if err != nil || r.Deliveries != 2 {
		t.Fatalf("publish without attributes: %+v, %v; want 2 deliveries", r, err)
	}
	book.add(fanPub{group: "plain", body: "plain-001"})

	// Dedup at the topic: the same key again delivers nothing, by CLI or
	// client, and answers with the first publication's id.
	again, err := cl.Publish(ctx, "orders", []byte("plain-001 again"), client.Group("plain"), client.DedupKey("k-plain-001"))
	if err != nil || !again.Deduplicated || again.Deliveries != 0 || again.ID != r.ID {
		t.Fatalf("repeat publish: %+v, %v; want deduplicated as %s with 0 deliveries", again, err, r.ID)
	}
	out = mustCLI("topic", "publish", "orders", "plain-001 again", "--group", "plain", "--dedup", "k-plain-001")
	if want := r.ID + " (deduplicated: an earlier publish had this key; no new deliveries)\n"; out != want {
		t.Fatalf("repeat publish through the CLI printed %q, want %q", out, want)
	}

	// A message every subscription gets and billing's handler refuses.
	if r, err := cl.Publish(ctx, "orders", []byte("poison-001"), client.Group("poison"), client.DedupKey("k-poison-001"),
		client.Attributes(map[string]string{"region": "eu-central"})); err != nil || r.Deliveries != 3 {
		t.Fatalf("publish poison: %+v, %v", r, err)
	}
	book.add(fanPub{group: "poison", body: "poison-001", eu: true})

	// --- kill -9 of shard 0's leader while every group publishes.
	victim := shardLeader(t, c, 0, 0)
	var wg sync.WaitGroup
	errs := make(chan error, len(groups))
	var killedAt time.Time
	killed := make(chan struct{})
	afterKill := make([]int, len(groups))
	for i, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 5; seq < 200; seq++ {
				if err := publish(g, seq, false); err != nil {
					errs <- err
					return
				}
				select {
				case <-killed:
					// Six acknowledged after the kill; the first of them waited
					// for shard 0's new leader if g is there.
					if afterKill[i]++; afterKill[i] == 6 {
						return
					}
				default:
				}
				if seq == 10 && i == 0 {
					killedAt = time.Now()
					c.Kill(victim)
					close(killed)
				}
			}
			errs <- fmt.Errorf("group %s: the kill never came", g)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("killed n%d (shard 0's leader) at %v; every group published 6 more after it, %d publish(es) retried after an error",
		victim+1, killedAt.Format(time.StampMilli), retries.Load())

	all := book.want(func(fanPub) bool { return true })
	eu := book.want(func(p fanPub) bool { return p.eu })
	t.Logf("acknowledged %d publications, %d for the eu filter", countBodies(all), countBodies(eu))

	out = mustCLI("topic", "list", "--json")
	var listed []struct {
		Name          string `json:"name"`
		Subscriptions []struct {
			Name string `json:"name"`
		} `json:"subscriptions"`
	}
	if err := json.Unmarshal([]byte(out), &listed); err != nil || len(listed) != 1 || len(listed[0].Subscriptions) != 3 {
		t.Fatalf("topic list --json: %v\n%s", err, out)
	}

	// --- orders-billing through the worker; the poison message is
	// dead-lettered there only.
	var mu sync.Mutex
	billing := map[string][]string{}
	poisoned := make(chan struct{}, 1)
	w, err := worker.New(cl, "orders-billing", worker.Options{
		Concurrency: 8, Visibility: 5 * time.Second, Wait: time.Second,
		OnError: func(context.Context, *worker.Message, error) {},
		Hooks: worker.Hooks{Settled: func(m *worker.Message, s worker.Settlement) {
			if s.Outcome == worker.DeadLettered {
				select {
				case poisoned <- struct{}{}:
				default:
					t.Errorf("a second message dead-lettered on orders-billing: %s", m.Body)
				}
			}
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	w.Default(func(_ context.Context, m *worker.Message) error {
		if m.Group == "poison" {
			return worker.Poison(errors.New("billing cannot charge this order"))
		}
		mu.Lock()
		defer mu.Unlock()
		billing[m.Group] = append(billing[m.Group], string(m.Body))
		return nil
	})
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(runCtx) }()
	wantBilling := book.want(func(p fanPub) bool { return p.group != "poison" })
	waitFor(t, ctx, "orders-billing's worker to handle every publication", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return countBodies(billing) >= countBodies(wantBilling) && len(poisoned) == 1
	})
	time.Sleep(time.Second) // anything extra would arrive now
	stop()
	if err := <-ran; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("worker: %v", err)
	}
	mu.Lock()
	checkDeliveries(t, "orders-billing (worker)", wantBilling, billing)
	mu.Unlock()
	out = mustCLI("dlq", "list", "orders-billing", "--json")
	if !strings.Contains(out, "billing cannot charge this order") || strings.Count(out, `"id"`) != 1 {
		t.Fatalf("orders-billing's dead letters:\n%s", out)
	}

	// --- the others through Receive and Ack: the poison message is an
	// ordinary delivery there.
	checkDeliveries(t, "orders-ship", all, receiveAll(t, ctx, cl, "orders-ship", countBodies(all)))
	checkDeliveries(t, "orders-eu (filtered)", eu, receiveAll(t, ctx, cl, "orders-eu", countBodies(eu)))
	for _, sub := range []string{"orders-ship", "orders-eu"} {
		if st, err := cl.Stats(ctx, sub); err != nil || st.Dead != 0 || st.Ready+st.InFlight+st.Delayed != 0 {
			t.Errorf("%s after its drain: %+v, %v; want empty, none dead", sub, st, err)
		}
	}

	// The topic keeps every publication for replay, once each, and holds
	// nothing ready.
	if st, err := cl.Stats(ctx, "orders"); err != nil || st.Retained != uint64(countBodies(all)) || st.Ready != 0 || st.InFlight != 0 {
		t.Errorf("the topic's stats: %+v, %v; want %d retained, none ready or in flight", st, err, countBodies(all))
	}

	// --- a subscription created now replays everything the topic
	// retains; one created with the default --from now, nothing.
	mustCLI("topic", "subscribe", "orders", "orders-audit", "--from", "earliest", "--visibility", "5s")
	mustCLI("topic", "subscribe", "orders", "orders-late", "--visibility", "5s")
	checkDeliveries(t, "orders-audit (--from earliest)", all, receiveAll(t, ctx, cl, "orders-audit", countBodies(all)))
	if ms, err := cl.Receive(ctx, "orders-late", client.ReceiveOptions{Max: 10, Wait: time.Second}); err != nil || len(ms) != 0 {
		t.Errorf("orders-late (--from now) received %d message(s), %v; want none", len(ms), err)
	}

	// A long poll on a subscription wakes at a publish that reaches it.
	type polled struct {
		ms      []*client.Message
		elapsed time.Duration
		err     error
	}
	woke := make(chan polled, 1)
	pollStart := time.Now()
	go func() {
		ms, err := cl.Receive(ctx, "orders-late", client.ReceiveOptions{Max: 1, Wait: client.MaxWait})
		woke <- polled{ms, time.Since(pollStart), err}
	}()
	time.Sleep(700 * time.Millisecond)
	if r, err := cl.Publish(ctx, "orders", []byte("late-001"), client.Group("late"), client.DedupKey("k-late-001")); err != nil || r.Deliveries != 4 {
		t.Fatalf("publish to 4 unfiltered subscriptions: %+v, %v", r, err)
	}
	// Woken by the publish, not by the 20 s wait running out: 10 s leaves
	// room for a loaded machine.
	if p := <-woke; p.err != nil || len(p.ms) != 1 || string(p.ms[0].Body) != "late-001" || p.elapsed > 10*time.Second {
		t.Fatalf("long poll on orders-late: %d message(s) after %v, %v; want late-001 woken by its publish", len(p.ms), p.elapsed, p.err)
	}

	out = mustCLI("topic", "get", "orders")
	for _, want := range []string{"orders-audit", "orders-billing", "orders-eu", "orders-late", "orders-ship", "BACKLOG"} {
		if !strings.Contains(out, want) {
			t.Fatalf("topic get lacks %q:\n%s", want, out)
		}
	}

	// --- a topic with subscriptions is not deleted; without, it is.
	out, err = cli("topic", "delete", "orders")
	if err == nil || !strings.Contains(out, "raftq topic unsubscribe NAME deletes one") {
		t.Fatalf("topic delete with subscriptions: %v\n%s", err, out)
	}
	if _, err := cl.GetQueue(ctx, "orders"); err != nil {
		t.Fatalf("the refused delete removed the topic: %v", err)
	}
	for _, sub := range []string{"orders-audit", "orders-billing", "orders-eu", "orders-late", "orders-ship"} {
		mustCLI("topic", "unsubscribe", sub)
	}
	mustCLI("topic", "delete", "orders")
	if out := mustCLI("topic", "list", "--json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("topic list after deleting everything: %s", out)
	}

	// The killed node comes back and its replicas converge with the
	// others: fan-out applies the same on every replica.
	c.Restart(victim)
	if err := c.WaitServing(ctx, victim); err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, c, victim)
	waitSameDigests(t, c, shards)
}

// receiveAll receives and acks from sub until n messages came, then
// checks for a second more that nothing else does, and returns each
// group's bodies in delivery order.
func receiveAll(t *testing.T, ctx context.Context, cl *client.Client, sub string, n int) map[string][]string {
	t.Helper()
	got := map[string][]string{}
	count := 0
	for end := time.Now().Add(30 * time.Second); ; {
		wait := 500 * time.Millisecond
		if count >= n {
			wait = time.Second
		}
		ms, err := cl.Receive(ctx, sub, client.ReceiveOptions{Max: 100, Wait: wait})
		if err != nil {
			if errors.Is(err, client.ErrUnavailable) && time.Now().Before(end) {
				continue
			}
			t.Fatalf("receive from %s: %v", sub, err)
		}
		if len(ms) == 0 && count >= n {
			return got
		}
		receipts := make([]string, len(ms))
		for i, m := range ms {
			got[m.Group] = append(got[m.Group], string(m.Body))
			receipts[i] = m.Receipt
			count++
		}
		if len(receipts) > 0 {
			if err := cl.AckBatch(ctx, receipts); err != nil {
				t.Fatalf("ack on %s: %v", sub, err)
			}
		}
		if time.Now().After(end) {
			t.Fatalf("%s: %d of %d messages in 30s", sub, count, n)
		}
	}
}
