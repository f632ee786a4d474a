package systest

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/internal/ledger"
	"github.com/raftq/raftq/internal/testcluster"
)

// The rolling tests do what docs/operations.md's "Rolling restart" and
// "Rolling upgrade" tell an operator to do, under load: stop one node with
// SIGTERM, start it again (on a new binary for the upgrade), wait until it
// is caught up by the runbook's own checks, then the next. Producers and
// consumers run throughout on a standard queue and a FIFO queue, and the
// ledger judges the whole history: nothing acknowledged lost, nothing
// stored twice, no message leased twice at once, every FIFO group in send
// order.

// rollRig is 3 nodes with 2 shards and the two queues' traffic.
type rollRig struct {
	t         *testing.T
	c         *testcluster.Cluster
	cl        *client.Client
	ctx       context.Context
	std, fifo *ledger.Traffic
}

const (
	rollQueue     = "roll"
	rollFIFOQueue = "rollfifo"
)

func newRollRig(t *testing.T, bin string) *rollRig {
	return newLoadRig(t, testcluster.Start(t, bin, testcluster.Options{Shards: 2}))
}

// newLoadRig starts traffic on c: two producers and a consumer on a
// standard queue, two ordered producers and a consumer on a FIFO queue.
func newLoadRig(t *testing.T, c *testcluster.Cluster) *rollRig {
	cl := dialLedgerClient(t, c)
	ctx := ctxT(t, 3*time.Minute)
	createLedgerQueue(t, cl, rollQueue)
	if _, err := cl.CreateQueue(ctx, rollFIFOQueue, client.QueueOptions{FIFO: true, Visibility: ledgerVisibility}); err != nil {
		t.Fatalf("create queue %s: %v", rollFIFOQueue, err)
	}
	r := &rollRig{t: t, c: c, cl: cl, ctx: ctx}
	r.std = ledger.NewTraffic(ctx, ledger.New(ledgerVisibility), cl, rollQueue)
	for p := range 2 {
		r.std.Producer(fmt.Sprintf("p%d", p), ledger.ProducerOptions{DedupKeys: true, Groups: 8})
	}
	r.std.Consumer("c0", 10)
	r.fifo = ledger.NewTraffic(ctx, ledger.New(ledgerVisibility), cl, rollFIFOQueue)
	for p := range 2 {
		r.fifo.Producer(fmt.Sprintf("f%d", p), ledger.ProducerOptions{DedupKeys: true, Groups: 4, Ordered: true})
	}
	r.fifo.Consumer("fc0", 10)
	t.Cleanup(r.std.Stop)
	t.Cleanup(r.fifo.Stop)
	waitFor(t, ctx, "traffic on both queues", func() bool {
		return r.std.SendsAcked.Load() >= 30 && r.std.AcksConfirmed.Load() >= 10 &&
			r.fifo.SendsAcked.Load() >= 20 && r.fifo.AcksConfirmed.Load() >= 10
	})
	return r
}

// progress is the acknowledged sends and confirmed acks of both queues.
func (r *rollRig) progress() (sends, acks int64) {
	return r.std.SendsAcked.Load() + r.fifo.SendsAcked.Load(), r.std.AcksConfirmed.Load() + r.fifo.AcksConfirmed.Load()
}

// formats is every member's recorded log format in node i's view.
func (r *rollRig) formats(i int) map[string]uint32 {
	st, err := raftqv1.NewClusterClient(r.c.Conn(i)).Status(r.ctx, &raftqv1.StatusRequest{})
	if err != nil {
		r.t.Fatalf("status of %s: %v", r.c.Nodes[i].ID, err)
	}
	out := map[string]uint32{}
	for _, m := range st.GetMembers() {
		out[m.GetNodeId()] = m.GetLogFormat()
	}
	return out
}

// roll stops node i with SIGTERM, starts it again (on bin, if set), and
// waits until it is caught up and recorded at log format want; the
// traffic must have gone on meanwhile.
func (r *rollRig) roll(i int, bin string, want uint32) {
	r.t.Helper()
	id := r.c.Nodes[i].ID
	// The SIGTERM lands on calls in progress.
	if err := r.std.WaitInFlight(r.ctx, true, true, false); err != nil {
		r.t.Fatal(err)
	}
	sends, acks := r.progress()
	began := time.Now()
	if err := r.c.Stop(i, 25*time.Second); err != nil {
		r.t.Fatalf("SIGTERM of %s: %v (it must exit 0)", id, err)
	}
	stopped := time.Since(began)
	if bin != "" {
		r.c.Nodes[i].Bin = bin
	}
	r.c.Restart(i)
	r.caughtUp(i, want)
	back := time.Since(began)
	// The load went on through the restart and goes on after it.
	waitFor(r.t, r.ctx, "sends and acks through "+id+"'s restart", func() bool {
		s, a := r.progress()
		return s >= sends+40 && a >= acks+20
	})
	s, a := r.progress()
	r.t.Logf("%s: exited %v after SIGTERM, caught up %v after it; %d sends and %d acks meanwhile", id,
		stopped.Round(time.Millisecond), back.Round(time.Millisecond), s-sends, a-acks)
}

// caughtUp waits until node i passes the checks docs/operations.md's
// "Rolling restart" asks for before the next node is touched:
//  1. healthy: gRPC health SERVING (what `raftq-node probe` asks) and
//     /healthz 200;
//  2. in its own `cluster status`: every member alive, meta and every
//     shard with a leader, and its own log format recorded as want;
//  3. caught up: `raftq --addr NODE cluster status --caught-up` exits 0:
//     on every shard it replicates, its APPLIED index has reached the
//     COMMIT index the shard's leader showed in its own `cluster status`
//     once the node was back.
func (r *rollRig) caughtUp(i int, want uint32) {
	r.t.Helper()
	n := r.c.Nodes[i]
	ctx, cancel := context.WithTimeout(r.ctx, 60*time.Second)
	defer cancel()
	if err := r.c.WaitServing(ctx, i); err != nil {
		r.c.DumpLogs()
		r.t.Fatalf("%s never served again: %v", n.ID, err)
	}
	waitFor(r.t, ctx, n.ID+" /healthz 200", func() bool { return httpOK(ctx, "http://"+n.HTTP+"/healthz") })
	var last string
	ready := func() bool {
		st, err := raftqv1.NewClusterClient(r.c.Conn(i)).Status(ctx, &raftqv1.StatusRequest{})
		if err != nil {
			last = err.Error()
			return false
		}
		if st.GetMetaLeaderId() == "" {
			last = "meta has no leader"
			return false
		}
		if len(st.GetMembers()) != len(r.c.Nodes) {
			last = fmt.Sprintf("%d members", len(st.GetMembers()))
			return false
		}
		for _, m := range st.GetMembers() {
			if m.GetState() != "alive" {
				last = m.GetNodeId() + " " + m.GetState()
				return false
			}
			if m.GetNodeId() == n.ID && m.GetLogFormat() != want {
				last = fmt.Sprintf("%s recorded at log format %d", n.ID, m.GetLogFormat())
				return false
			}
		}
		for _, s := range st.GetShards() {
			if s.GetLeaderId() == "" {
				last = fmt.Sprintf("shard %d has no leader", s.GetShardId())
				return false
			}
		}
		return true
	}
	if err := ledger.WaitFor(ctx, n.ID+"'s status ready", ready, 100*time.Millisecond); err != nil {
		r.t.Fatalf("%v; last: %s", err, last)
	}
	// Check 3 is the operator's own command: it asks each shard's leader
	// for its commit index once and waits for the node to apply it.
	cctx, cancelCLI := context.WithTimeout(ctx, 40*time.Second)
	defer cancelCLI()
	out, err := exec.CommandContext(cctx, cliBin, "--addr", n.GRPC, "--timeout", "10s",
		"cluster", "status", "--wait", "30s", "--caught-up").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "node "+n.ID+",") {
		r.c.DumpLogs()
		r.t.Fatalf("raftq --addr %s cluster status --caught-up: %v\n%s", n.ID, err, out)
	}
}

func httpOK(ctx context.Context, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// finish keeps the traffic going a little past the last node, stops it and
// judges both queues' ledgers.
func (r *rollRig) finish() {
	r.t.Helper()
	sends, _ := r.progress()
	waitFor(r.t, r.ctx, "sends after the last node", func() bool { s, _ := r.progress(); return s >= sends+30 })
	r.std.Stop()
	r.fifo.Stop()
	judge(r.t, r.ctx, r.std, r.cl, rollQueue)
	judge(r.t, r.ctx, r.fifo, r.cl, rollFIFOQueue)
}

// Every node in turn: SIGTERM, start again on the same binary and data,
// wait until it is caught up, then the next; under load, nothing lost.
func TestRolling_RestartEveryNodeUnderLoad(t *testing.T) {
	t.Parallel() // see the package comment
	r := newRollRig(t, nodeBin)
	for i := range r.c.Nodes {
		r.roll(i, "", fsm.LogFormat)
	}
	r.finish()
}

// A rolling upgrade: the cluster starts on the previous release's binary
// (upgradeFrom, built from git history) and each node in turn restarts on
// this tree's. Each upgraded node is recorded at this binary's log format
// before the next is touched; under load, nothing lost.
func TestRolling_UpgradeEveryNodeUnderLoad(t *testing.T) {
	t.Parallel() // see the package comment
	old, commit := previousNodeBin(t)
	r := newRollRig(t, old)
	before := r.formats(0)
	from := before["n1"]
	for _, f := range before {
		if f != from || f == 0 || f > fsm.LogFormat {
			t.Fatalf("log formats before the upgrade %v: want every node at one format, 1..%d", before, fsm.LogFormat)
		}
	}
	t.Logf("cluster of %s at log format %d; upgrading to log format %d", commit, from, fsm.LogFormat)
	for i := range r.c.Nodes {
		r.roll(i, nodeBin, fsm.LogFormat)
		// Nodes not yet rolled keep their record: gating holds back the
		// new format's kinds until the last one is upgraded.
		formats := r.formats(i)
		for k, n := range r.c.Nodes {
			want := from
			if k <= i {
				want = fsm.LogFormat
			}
			if formats[n.ID] != want {
				t.Fatalf("after upgrading %s, %s is recorded at log format %d, want %d", r.c.Nodes[i].ID, n.ID, formats[n.ID], want)
			}
		}
	}
	// With every node upgraded the gate opens: a drain (drain_node and
	// retire_node, format-2 meta kinds) of a node joined on the new binary
	// goes through.
	r.c.SetBin(nodeBin)
	r.c.AddNode()
	waitFor(t, r.ctx, "n4 a live meta member", func() bool { return r.formats(0)["n4"] == fsm.LogFormat })
	out, err := exec.CommandContext(r.ctx, cliBin, "--addr", r.c.Nodes[0].GRPC, "cluster", "remove-node", "n4", "--wait", "1m").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "node n4 drained, removed and retired") {
		t.Fatalf("remove-node n4 after the upgrade: %v\n%s", err, out)
	}
	r.finish()
}
