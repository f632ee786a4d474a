package systest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/internal/ledger"
	"github.com/raftq/raftq/internal/testcluster"
)

// The ledger tests run real traffic through the client SDK against real
// node processes, inject a fault, drain the queue and hand the whole
// history to internal/ledger: every acknowledged send delivered, none
// stored twice (every send carries a dedup key), no message whose ack was
// confirmed delivered again, no redelivery inside a lease.

// ledgerVisibility is the queues' lease: short, so the drain can wait out
// every lease of the run and see anything that comes back.
const ledgerVisibility = 5 * time.Second

// ledgerSettle is how long the drain keeps looking after the last lease
// could have ended: a leader change adds its grace (election timeout plus
// twice the clock bound, docs/fsm.md "LeaderGrace") and skew to older
// leases.
const ledgerSettle = 5 * time.Second

func dialLedgerClient(t *testing.T, c *testcluster.Cluster) *client.Client {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	cl, err := client.Dial(ctx, c.Addrs(), client.WithCallTimeout(3*time.Second))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

func createLedgerQueue(t *testing.T, cl *client.Client, name string) {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	if _, err := cl.CreateQueue(ctx, name, client.QueueOptions{Visibility: ledgerVisibility}); err != nil {
		t.Fatalf("create queue %s: %v", name, err)
	}
}

func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	if err := ledger.WaitFor(ctx, what, cond, 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
}

// judge drains the queue and fails t on any violation of the contract or
// any ack that failed without a clear answer.
func judge(t *testing.T, ctx context.Context, tr *ledger.Traffic, cl *client.Client, queue string) ledger.Verdict {
	t.Helper()
	for _, err := range tr.Unclear() {
		t.Errorf("consumer ack without a clear answer: %v", err)
	}
	if err := tr.L.Drain(ctx, cl, queue, ledgerSettle); err != nil {
		t.Errorf("drain: %v", err)
	}
	v := tr.L.Check()
	t.Logf("ledger: %s", v)
	if err := v.Err(); err != nil {
		t.Fatal(err)
	}
	return v
}

// SIGTERM of the shard leader while sends, receives and acks are in
// flight at it (one shard: every call goes there). The node exits 0, the
// two left keep serving sends and acks, and after it restarts the drain
// finds every acknowledged send, nothing stored twice, and nothing acked
// back again.
func TestLedger_SIGTERMShardLeaderWithCallsInFlight(t *testing.T) {
	c := startCluster(t, testcluster.Options{Shards: 1})
	cl := dialLedgerClient(t, c)
	createLedgerQueue(t, cl, "sigterm")
	ctx := ctxT(t, 4*time.Minute)

	tr := ledger.NewTraffic(ctx, ledger.New(ledgerVisibility), cl, "sigterm")
	for p := range 3 {
		tr.Producer(fmt.Sprintf("p%d", p), ledger.ProducerOptions{DedupKeys: true})
	}
	for k := range 2 {
		tr.Consumer(fmt.Sprintf("c%d", k), 10)
	}
	defer tr.Stop()
	waitFor(t, ctx, "traffic", func() bool { return tr.SendsAcked.Load() >= 50 && tr.AcksConfirmed.Load() >= 20 })

	victim := shardLeader(t, c, 0, 0)
	if err := tr.WaitInFlight(ctx, true, true, true); err != nil {
		t.Fatal(err)
	}
	inFlight := tr.InFlight()
	sends, acks := tr.SendsAcked.Load(), tr.AcksConfirmed.Load()
	if err := c.Stop(victim, 25*time.Second); err != nil {
		t.Fatalf("SIGTERM of shard leader %s: %v", c.Nodes[victim].ID, err)
	}
	t.Logf("SIGTERM to %s (shard 0 leader) with %s in flight; it exited 0", c.Nodes[victim].ID, inFlight)
	// The two left serve sends and acks again.
	waitFor(t, ctx, "sends and acks after the SIGTERM", func() bool {
		return tr.SendsAcked.Load() >= sends+50 && tr.AcksConfirmed.Load() >= acks+20
	})
	c.Restart(victim)
	if err := c.WaitServing(ctx, victim); err != nil {
		t.Fatalf("restart %s: %v", c.Nodes[victim].ID, err)
	}
	tr.Stop()
	judge(t, ctx, tr, cl, "sigterm")
}

// kill -9 of every node at once while sends are in flight: whatever was
// acknowledged had been fsync'd by a quorum, so after all three restart
// from their disks every acknowledged send is delivered, and every ack a
// consumer had confirmed still holds.
func TestLedger_KillEveryNodeAtOnceLosesNothingAcknowledged(t *testing.T) {
	c := startCluster(t, testcluster.Options{})
	cl := dialLedgerClient(t, c)
	createLedgerQueue(t, cl, "crash")
	ctx := ctxT(t, 4*time.Minute)

	tr := ledger.NewTraffic(ctx, ledger.New(ledgerVisibility), cl, "crash")
	for p := range 4 {
		tr.Producer(fmt.Sprintf("p%d", p), ledger.ProducerOptions{DedupKeys: true, Groups: 16})
	}
	tr.Consumer("c0", 10)
	defer tr.Stop()
	waitFor(t, ctx, "traffic", func() bool { return tr.SendsAcked.Load() >= 100 && tr.AcksConfirmed.Load() >= 20 })

	if err := tr.WaitInFlight(ctx, true, false, false); err != nil {
		t.Fatal(err)
	}
	inFlight := tr.InFlight()
	sends := tr.SendsAcked.Load()
	c.KillEvery()
	t.Logf("kill -9 of every node with %s in flight, after %d acknowledged sends", inFlight, sends)
	for i := range c.Nodes {
		c.Restart(i)
	}
	for i := range c.Nodes {
		if err := c.WaitServing(ctx, i); err != nil {
			t.Fatalf("restart %s: %v", c.Nodes[i].ID, err)
		}
	}
	// The restarted cluster takes sends again before the drain.
	after := tr.SendsAcked.Load()
	waitFor(t, ctx, "sends after the restart", func() bool { return tr.SendsAcked.Load() >= after+50 })
	tr.Stop()
	judge(t, ctx, tr, cl, "crash")
}

// Consumers hold leases when the shard leader is killed (kill -9) and ack
// only once a new leader may be serving, while another consumer keeps
// receiving through the failover. Each held ack succeeds or fails with a
// clear answer; nothing is lost; and no held message is handed to anyone
// else before its lease could have ended. The new leader extends leases
// granted in the old term by its grace (docs/fsm.md, "LeaderGrace"), so
// holders whose acks reach it in time have them confirmed.
func TestLedger_LeasesHeldAcrossLeaderKill(t *testing.T) {
	c := startCluster(t, testcluster.Options{Shards: 1})
	cl := dialLedgerClient(t, c)
	createLedgerQueue(t, cl, "leases")
	ctx := ctxT(t, 4*time.Minute)
	l := ledger.New(ledgerVisibility)

	const n = 60
	for k := range n {
		body := fmt.Sprintf("m-%d", k)
		l.Attempt(body)
		r, err := cl.Send(ctx, "leases", []byte(body), client.DedupKey(body))
		if err != nil {
			t.Fatalf("send %s: %v", body, err)
		}
		l.Sent(body, r.ID, nil)
	}
	// Three holders lease ten messages each and keep them.
	var held [][]*client.Message
	for k := range 3 {
		var ms []*client.Message
		for len(ms) < 10 {
			got, err := l.Receive(ctx, cl, "leases", client.ReceiveOptions{Max: 10 - len(ms), Wait: 2 * time.Second, Consumer: fmt.Sprintf("holder%d", k)})
			if err != nil {
				t.Fatalf("holder %d receive: %v", k, err)
			}
			ms = append(ms, got...)
		}
		held = append(held, ms)
	}
	// A fourth consumer takes and acks whatever it is given, through the
	// failover: anything held that reached it early is a broken lease.
	poach := ledger.NewTraffic(ctx, l, cl, "leases")
	poach.Consumer("poacher", 5)
	defer poach.Stop()
	waitFor(t, ctx, "the poacher to take the messages nobody holds", func() bool { return poach.AcksConfirmed.Load() >= n-30 })

	victim := shardLeader(t, c, 0, 0)
	c.Kill(victim)
	killedAt := time.Now()
	var wg sync.WaitGroup
	results := make([][]error, len(held))
	for k, ms := range held {
		wg.Go(func() {
			actx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			results[k] = ackUntilKnown(actx, l, cl, ms)
		})
	}
	wg.Wait()
	confirmed, failed := 0, 0
	for k, errs := range results {
		for i, err := range errs {
			switch {
			case err == nil:
				confirmed++
			case ledger.Clear(err):
				failed++
				t.Logf("holder %d: ack of %s after the kill failed clearly: %v", k, held[k][i].ID, err)
			default:
				t.Errorf("holder %d: ack of %s after the kill: %v, not a clear answer", k, held[k][i].ID, err)
			}
		}
	}
	t.Logf("kill -9 of %s (shard 0 leader) with 30 leases held; the holders' acks were answered %v after the kill: %d confirmed, %d failed clearly",
		c.Nodes[victim].ID, time.Since(killedAt).Round(time.Millisecond), confirmed, failed)
	poach.Stop()
	for _, err := range poach.Unclear() {
		t.Errorf("poacher: %v", err)
	}
	if err := l.Drain(ctx, cl, "leases", ledgerSettle); err != nil {
		t.Errorf("drain: %v", err)
	}
	v := l.Check()
	t.Logf("ledger: %s", v)
	if err := v.Err(); err != nil {
		t.Fatal(err)
	}
	if v.AckedSends != n {
		t.Fatalf("%d acknowledged sends booked, want %d", v.AckedSends, n)
	}
}

// ackUntilKnown acks ms as a consumer holding them would: an ack whose
// outcome is unknown (UNAVAILABLE: during the election a node answers
// "call not forwarded" per receipt, and the client hands that back) is
// repeated until the server confirms it or refuses it, or ctx ends. It
// returns each message's last answer.
func ackUntilKnown(ctx context.Context, l *ledger.Ledger, cl *client.Client, ms []*client.Message) []error {
	out := make([]error, len(ms))
	todo := make([]int, len(ms))
	for i := range ms {
		todo[i] = i
	}
	for len(todo) > 0 {
		batch := make([]*client.Message, len(todo))
		for j, i := range todo {
			batch[j] = ms[i]
		}
		var again []int
		for j, err := range l.Ack(ctx, cl, batch) {
			out[todo[j]] = err
			if errors.Is(err, client.ErrUnavailable) && ctx.Err() == nil {
				again = append(again, todo[j])
			}
		}
		todo = again
		if len(todo) > 0 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	return out
}
