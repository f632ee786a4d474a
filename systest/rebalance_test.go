package systest

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/internal/ledger"
	"github.com/raftq/raftq/internal/testcluster"
)

// rebalanceStable is the stability wait of the rebalance tests: long
// enough to print the plan before the first move, short for the test.
const rebalanceStable = "5s"

// spreadOf reports each node's replicas and leads in one view and
// whether both counts are within 1 across the nodes, with every one of
// shards led.
func spreadOf(ns []client.NodeInfo, shards int) (desc string, even bool) {
	lo, hi, llo, lhi, led := 1<<30, -1, 1<<30, -1, 0
	for _, n := range ns {
		if n.Retired {
			continue
		}
		lo, hi = min(lo, len(n.Replicas)), max(hi, len(n.Replicas))
		llo, lhi = min(llo, len(n.Leaders)), max(lhi, len(n.Leaders))
		led += len(n.Leaders)
		desc += fmt.Sprintf("%s:%v/%v ", n.NodeID, n.Replicas, n.Leaders)
	}
	return desc, hi-lo <= 1 && lhi-llo <= 1 && led == shards
}

func dryRun(ctx context.Context, addr string) (client.RebalancePlan, string, error) {
	out, err := exec.CommandContext(ctx, cliBin, "--addr", addr, "cluster", "rebalance", "--dry-run", "--json").CombinedOutput()
	if err != nil {
		return client.RebalancePlan{}, string(out), err
	}
	var p client.RebalancePlan
	err = json.Unmarshal(out, &p)
	return p, string(out), err
}

// A 4th node joins a 3-node cluster of 4 shards under a light load: the
// dry run prints the plan (3 moves onto n4) before anything moves, then
// the meta leader carries it out on its own once membership has been
// stable, until every node holds 3 replicas and leads one shard; the
// ledger finds nothing lost and no double lease.
func TestRebalance_NewNodeReceivesItsShare(t *testing.T) {
	t.Parallel() // see the package comment
	c := startCluster(t, testcluster.Options{Shards: 4, Args: []string{"--rebalance-stable", rebalanceStable}})
	cl := dialLedgerClient(t, c)
	createLedgerQueue(t, cl, "grow")
	ctx := ctxT(t, 3*time.Minute)
	tr := flowingTraffic(t, ctx, cl, "grow")
	c.AddNode()

	// The dry run, once n4 counts: every move goes onto n4.
	var plan client.RebalancePlan
	var out string
	waitFor(t, ctx, "a dry run planning n4's share", func() bool {
		var err error
		plan, out, err = dryRun(ctx, c.Nodes[0].GRPC)
		return err == nil && len(plan.Nodes) == 4
	})
	if len(plan.Moves) != 3 || plan.Started || plan.Moving != "" || !plan.Automatic {
		t.Fatalf("dry run before the first move: %s", out)
	}
	for _, mv := range plan.Moves {
		if mv.To != "n4" {
			t.Errorf("planned move %+v is not onto n4", mv)
		}
	}
	text, err := exec.CommandContext(ctx, cliBin, "--addr", c.Nodes[1].GRPC, "cluster", "rebalance", "--dry-run").CombinedOutput()
	if err != nil || !strings.Contains(string(text), "dry run: nothing changed") || !strings.Contains(string(text), "n4") {
		t.Fatalf("dry run as text: %v\n%s", err, text)
	}
	t.Logf("plan:\n%s", text)

	var last string
	ok := func() bool {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		ns, err := cl.Nodes(cctx)
		if err != nil || len(ns) != 4 {
			return false
		}
		var even bool
		last, even = spreadOf(ns, 4)
		for _, n := range ns {
			if len(n.Replicas) != 3 {
				return false
			}
		}
		return even
	}
	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := ledger.WaitFor(wctx, "3 replicas and 1 lead per node", ok, 200*time.Millisecond); err != nil {
		c.DumpLogs()
		t.Fatalf("%v; last view (node:replicas/leads): %s", err, last)
	}
	t.Logf("balanced: %s", last)
	if p, out, err := dryRun(ctx, c.Nodes[3].GRPC); err != nil || len(p.Moves) != 0 || len(p.Leaders) != 0 {
		t.Fatalf("dry run once balanced: %v\n%s", err, out)
	}
	text, err = exec.CommandContext(ctx, cliBin, "--addr", c.Nodes[2].GRPC, "cluster", "rebalance").CombinedOutput()
	if err != nil || !strings.Contains(string(text), "balanced: nothing to do") {
		t.Fatalf("rebalance once balanced: %v\n%s", err, text)
	}

	sends := tr.SendsAcked.Load()
	waitFor(t, ctx, "sends after the rebalance", func() bool { return tr.SendsAcked.Load() >= sends+30 })
	tr.Stop()
	judge(t, ctx, tr, cl, "grow")
}

// flowingTraffic starts a producer (dedup keys, 4 groups) and a consumer
// on queue, and waits until both have made progress.
func flowingTraffic(t *testing.T, ctx context.Context, cl *client.Client, queue string) *ledger.Traffic {
	t.Helper()
	tr := ledger.NewTraffic(ctx, ledger.New(ledgerVisibility), cl, queue)
	tr.Producer("p0", ledger.ProducerOptions{DedupKeys: true, Groups: 4})
	tr.Consumer("c0", 10)
	t.Cleanup(tr.Stop)
	waitFor(t, ctx, "traffic", func() bool { return tr.SendsAcked.Load() >= 30 && tr.AcksConfirmed.Load() >= 10 })
	return tr
}
