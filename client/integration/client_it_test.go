package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/internal/ledger"
	"github.com/raftq/raftq/internal/testcluster"
	"github.com/raftq/raftq/wire"
	"github.com/raftq/raftq/worker"
)

func TestClient_RoutesAndSettlesAcrossShards(t *testing.T) {
	c := testcluster.Start(t, nodeBin, testcluster.Options{})
	cl := mustDial(t, c)
	ctx := ctxT(t, time.Minute)
	if cl.ShardCount() != 4 {
		t.Fatalf("ShardCount = %d, want 4", cl.ShardCount())
	}
	if _, err := cl.CreateQueue(ctx, "it", client.QueueOptions{Visibility: 10 * time.Second}); err != nil {
		t.Fatalf("CreateQueue: %v", err)
	}
	shards := map[uint32]bool{}
	for i := range 40 {
		g := fmt.Sprintf("g%d", i)
		r, err := cl.Send(ctx, "it", []byte(g), client.Group(g))
		if err != nil {
			t.Fatalf("Send: %v", err)
		}
		id, err := wire.ParseMessageID(r.ID)
		if err != nil || id.Shard != wire.ShardFor("it", g, 4) {
			t.Fatalf("message %s of group %s not on shard %d", r.ID, g, wire.ShardFor("it", g, 4))
		}
		shards[id.Shard] = true
	}
	if len(shards) != 4 {
		t.Fatalf("40 groups landed on %d shards", len(shards))
	}
	var receipts []string
	for len(receipts) < 40 {
		ms, err := cl.Receive(ctx, "it", client.ReceiveOptions{Max: 40, Wait: 2 * time.Second})
		if err != nil {
			t.Fatalf("Receive: %v", err)
		}
		if len(ms) == 0 {
			t.Fatalf("received %d of 40", len(receipts))
		}
		for _, m := range ms {
			receipts = append(receipts, m.Receipt)
		}
	}
	if err := cl.AckBatch(ctx, receipts); err != nil {
		t.Fatalf("AckBatch: %v", err)
	}
	// Acks are idempotent: the same receipt again is a repeat, success.
	// A nack of it is refused and says the message is done.
	if err := cl.Ack(ctx, receipts[0]); err != nil {
		t.Fatalf("second ack = %v; want success (already acked with this receipt)", err)
	}
	r0, _ := wire.ParseReceipt(receipts[0])
	nerr := cl.Nack(ctx, receipts[0], client.NackOptions{})
	if !errors.Is(nerr, client.ErrStaleReceipt) || !strings.Contains(nerr.Error(), "message "+wire.MessageID{Shard: r0.Shard, ID: r0.ID}.String()+": ") ||
		!strings.Contains(nerr.Error(), "already acked") {
		t.Fatalf("nack after ack = %v; want ErrStaleReceipt naming the message and saying it was already acked", nerr)
	}
	st, err := cl.Stats(ctx, "it")
	if err != nil || st.Ready+st.InFlight+st.Delayed != 0 {
		t.Fatalf("Stats after acking all = %+v, %v", st, err)
	}
	if _, err := cl.GetQueue(ctx, "missing"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("GetQueue(missing) = %v", err)
	}
}

// Producers send through the client while the leader of shard 0 is
// killed (kill -9) with sends in flight. The client's retries and its
// automatic dedup keys must carry them across: sends are acknowledged
// again after the kill, and the ledger (internal/ledger) finds every
// acknowledged send delivered, none stored twice, and no message whose ack
// was confirmed delivered again.
func TestClient_LeaderKillSendsLoseNothingAndDuplicateNothing(t *testing.T) {
	// Blocking Sends, and SendAsync with a window per producer: both ride
	// the same coalescing and retries across the kill.
	for _, async := range []bool{false, true} {
		name := "Send"
		if async {
			name = "SendAsync"
		}
		t.Run(name, func(t *testing.T) { leaderKillSends(t, async) })
	}
}

func leaderKillSends(t *testing.T, async bool) {
	c := testcluster.Start(t, nodeBin, testcluster.Options{})
	cl := mustDial(t, c, client.WithCallTimeout(3*time.Second))
	ctx := ctxT(t, 3*time.Minute)
	const visibility = 5 * time.Second
	if _, err := cl.CreateQueue(ctx, "kill", client.QueueOptions{Visibility: visibility}); err != nil {
		t.Fatalf("CreateQueue: %v", err)
	}
	victim := shardLeaderIndex(t, c, cl, 0)
	tr := ledger.NewTraffic(ctx, ledger.New(visibility), cl, "kill")
	window := 0
	if async {
		window = 32
	}
	// Acknowledged sends to shard 0 since the kill.
	var killed atomic.Bool
	var shard0 atomic.Int64
	tr.OnSent = func(id string) {
		if mid, err := wire.ParseMessageID(id); err == nil && mid.Shard == 0 && killed.Load() {
			shard0.Add(1)
		}
	}
	for p := range 4 {
		tr.Producer(fmt.Sprintf("p%d", p), ledger.ProducerOptions{Window: window, Groups: 16})
	}
	defer tr.Stop()
	wait := func(what string, cond func() bool) {
		t.Helper()
		if err := ledger.WaitFor(ctx, what, cond, 10*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	wait("sends before the kill", func() bool { return tr.SendsAcked.Load() >= 50 })
	if err := tr.WaitInFlight(ctx, true, false, false); err != nil {
		t.Fatal(err)
	}
	inFlight, before := tr.InFlight(), tr.SendsAcked.Load()
	killed.Store(true)
	c.Kill(victim)
	// Shard 0 has a new leader and takes sends again.
	wait("sends to shard 0 after the kill", func() bool { return shard0.Load() >= 20 })
	tr.Stop()
	t.Logf("killed %s (shard 0 leader) with %s in flight after %d acknowledged sends; %d acknowledged after it",
		c.Nodes[victim].ID, inFlight, before, tr.SendsAcked.Load()-before)

	if err := tr.L.Drain(ctx, cl, "kill", 2*time.Second); err != nil {
		t.Errorf("drain: %v", err)
	}
	v := tr.L.Check()
	t.Logf("ledger: %s", v)
	if err := v.Err(); err != nil {
		t.Fatal(err)
	}
}

func TestWorker_ProcessesEverythingOnACluster(t *testing.T) {
	c := testcluster.Start(t, nodeBin, testcluster.Options{})
	cl := mustDial(t, c)
	ctx := ctxT(t, time.Minute)
	if _, err := cl.CreateQueue(ctx, "w", client.QueueOptions{MaxReceives: 3, BackoffBase: 50 * time.Millisecond, BackoffMax: 100 * time.Millisecond}); err != nil {
		t.Fatalf("CreateQueue: %v", err)
	}
	const n = 120
	items := make([]client.Outgoing, n)
	for i := range items {
		items[i] = client.Outgoing{Body: fmt.Appendf(nil, "%d", i), Type: "ok"}
		if i%10 == 0 {
			items[i].Type = "flaky"
		}
		if i%30 == 0 {
			items[i].Type = "poison"
		}
	}
	res, err := cl.SendBatch(ctx, "w", items)
	if err != nil {
		t.Fatalf("SendBatch: %v", err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("SendBatch item: %v", r.Err)
		}
	}
	var ok, flakyTries atomic.Int32
	w, err := worker.New(cl, "w", worker.Options{Concurrency: 8, Wait: time.Second, Visibility: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w.Register("ok", func(context.Context, *worker.Message) error { ok.Add(1); return nil })
	w.Register("flaky", func(_ context.Context, m *worker.Message) error {
		flakyTries.Add(1)
		if m.ReceiveCount < 2 {
			return errors.New("first try fails")
		}
		ok.Add(1)
		return nil
	})
	w.Register("poison", func(context.Context, *worker.Message) error { return worker.Poison(errors.New("bad")) })
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	const wantOK = n - n/30
	deadline := time.Now().Add(40 * time.Second)
	for ok.Load() < wantOK && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if ok.Load() != wantOK {
		t.Fatalf("handled %d successfully, want %d", ok.Load(), wantOK)
	}
	dead, err := cl.ListDead(ctx, "w", 0)
	if err != nil || len(dead) != n/30 {
		t.Fatalf("ListDead = %d, %v; want %d", len(dead), err, n/30)
	}
	for _, d := range dead {
		if d.LastError != "bad" {
			t.Errorf("dead message %s last error %q", d.ID, d.LastError)
		}
	}
}

func TestCLI_AgainstCluster(t *testing.T) {
	c := testcluster.Start(t, nodeBin, testcluster.Options{})
	addr := strings.Join(c.Addrs(), ",")
	cli := func(args ...string) (string, int) {
		cmd := exec.Command(cliBin, append([]string{"--addr", addr, "--timeout", "15s"}, args...)...)
		out, err := cmd.Output()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return string(out) + string(ee.Stderr), ee.ExitCode()
		}
		if err != nil {
			t.Fatalf("run raftq: %v", err)
		}
		return string(out), 0
	}
	if out, code := cli("queue", "create", "cli", "--max-receives", "4"); code != 0 {
		t.Fatalf("queue create: %d %s", code, out)
	}
	if out, code := cli("send", "cli", "hi", "--group", "g"); code != 0 || !strings.Contains(out, "-") {
		t.Fatalf("send: %d %s", code, out)
	}
	out, code := cli("receive", "cli", "--wait", "5s", "--json")
	var ms []map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &ms) != nil || len(ms) != 1 || ms[0]["body"] != "hi" {
		t.Fatalf("receive: %d %s", code, out)
	}
	if out, code := cli("ack", ms[0]["receipt"].(string)); code != 0 {
		t.Fatalf("ack: %d %s", code, out)
	}
	if out, code := cli("queue", "get", "nope"); code != 1 || !strings.Contains(out, `raftq: `) {
		t.Fatalf("queue get nope: %d %s", code, out)
	}
	if out, code := cli("cluster", "status"); code != 0 || !strings.Contains(out, "SHARD") {
		t.Fatalf("cluster status: %d %s", code, out)
	}
	for i := range c.Nodes {
		c.Kill(i)
	}
	if out, code := cli("--timeout", "3s", "queue", "list"); code != 3 {
		t.Fatalf("with every node down: exit %d, %s", code, out)
	}
}

// A node's refusal of a queue's sends with a retry time is kept by the
// client (client/hold.go): the next send within that time is answered by
// the client itself with the node's words, and a client with the hold
// off asks the node again. A caller with retries left waits it out.
func TestClient_SendHoldKeepsANodesRefusal(t *testing.T) {
	// One shard: the queue's rate is not split, and every send meets it.
	c := testcluster.Start(t, nodeBin, testcluster.Options{Shards: 1})
	ctx := ctxT(t, 90*time.Second)
	once := client.WithRetry(client.RetryPolicy{MaxAttempts: 1, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond})
	cl := mustDial(t, c, once)
	off := mustDial(t, c, once, client.WithSendHold(false))
	patient := mustDial(t, c)
	if _, err := cl.CreateQueue(ctx, "rated", client.QueueOptions{Quotas: client.Quotas{SendRate: 1, SendBurst: 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Send(ctx, "rated", []byte("1")); err != nil {
		t.Fatalf("first send within the burst: %v", err)
	}
	held := func(err error) bool {
		var e *client.Error
		return errors.As(err, &e) && e.Held
	}
	_, err := cl.Send(ctx, "rated", []byte("2"))
	after, ok := client.RetryAfter(err)
	if !errors.Is(err, client.ErrExhausted) || !ok || held(err) || !strings.Contains(err.Error(), "send_rate") {
		t.Fatalf("second send: want the node's send_rate refusal with a retry time, got %v (retry %v %v, held %v)", err, after, ok, held(err))
	}
	_, err = cl.Send(ctx, "rated", []byte("3"))
	if !errors.Is(err, client.ErrExhausted) || !held(err) || !strings.Contains(err.Error(), "send_rate") {
		t.Fatalf("third send at once: want the client's hold repeating the node's words, got %v", err)
	}
	if d, ok := client.RetryAfter(err); !ok || d <= 0 || d > after*5/4+time.Millisecond {
		t.Fatalf("held send's retry time %v %v, want at most the node's %v plus a quarter", d, ok, after)
	}
	// Batches of the queue are held alike.
	if _, err := cl.SendBatch(ctx, "rated", []client.Outgoing{{Body: []byte("4")}, {Body: []byte("5")}}); !held(err) {
		t.Fatalf("batch within the hold: want it held, got %v", err)
	}
	// Another queue is not.
	if _, err := cl.CreateQueue(ctx, "open", client.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Send(ctx, "open", []byte("x")); err != nil {
		t.Fatalf("a send to another queue: %v", err)
	}
	// Without the hold, the node answers (and refuses) again.
	if _, err := off.Send(ctx, "rated", []byte("6")); !errors.Is(err, client.ErrExhausted) || held(err) {
		t.Fatalf("send with the hold off: want the node's refusal, got %v", err)
	}
	// A caller with retries waits out the node's refusals and its own.
	if _, err := patient.Send(ctx, "rated", []byte("7")); err != nil {
		t.Fatalf("a send with the default retries: %v", err)
	}
	if st, err := cl.Stats(ctx, "rated"); err != nil || st.Ready != 2 {
		t.Fatalf("queue holds %d messages (err %v), want the 2 taken", st.Ready, err)
	}
}
