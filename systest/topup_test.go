package systest

import (
	"context"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/raftq/raftq/internal/ledger"
	"github.com/raftq/raftq/internal/testcluster"
)

// Raising --replication on a running cluster, node by node, tops every
// shard up to it under load with automatic rebalancing off: a 3-node
// cluster at --replication 2 runs each shard on two replicas, so a kill -9
// of either stops the shard; restarted with --replication 3, every shard
// gets its third replica, and the cluster then rides out a kill -9 of any
// node. The ledger finds nothing lost.
func TestTopUp_RaisingReplication(t *testing.T) {
	t.Parallel() // see the package comment
	c := startCluster(t, testcluster.Options{Shards: 2, Args: []string{"--replication", "2", "--rebalance=false"}})
	cl := dialLedgerClient(t, c)
	createLedgerQueue(t, cl, "topup")
	ctx := ctxT(t, 4*time.Minute)
	tr := flowingTraffic(t, ctx, cl, "topup")

	var last string
	// replicas reports whether the answering node's map places the two
	// shards on want replicas in all.
	replicas := func(want int) func() bool {
		return func() bool {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			ns, err := cl.Nodes(cctx)
			if err != nil {
				last = err.Error()
				return false
			}
			last = ""
			total := 0
			for _, n := range ns {
				last += fmt.Sprintf("%s:%v ", n.NodeID, n.Replicas)
				total += len(n.Replicas)
			}
			return len(ns) == 3 && total == want
		}
	}
	if !replicas(4)() {
		t.Fatalf("at --replication 2: %s", last)
	}
	for i := range c.Nodes {
		if err := c.Stop(i, 20*time.Second); err != nil {
			t.Fatalf("stop %s: %v", c.Nodes[i].ID, err)
		}
		c.Nodes[i].ExtraArgs = append(c.Nodes[i].ExtraArgs, "--replication", "3")
		c.Restart(i)
		if err := c.WaitServing(ctx, i); err != nil {
			t.Fatalf("%s after its restart: %v", c.Nodes[i].ID, err)
		}
		caughtUp(t, ctx, c, i)
	}
	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	// The map lists a top-up's target as a replica from its promote step
	// on, before the group has promoted it: done means no move is left.
	done := func() bool {
		if !replicas(6)() {
			return false
		}
		p, out, err := dryRun(ctx, c.Nodes[1].GRPC)
		if err != nil || p.Moving != "" || len(p.Moves) > 0 {
			last += "; rebalance plan: " + out
			return false
		}
		return true
	}
	if err := ledger.WaitFor(wctx, "both shards on three replicas, no move left", done, 200*time.Millisecond); err != nil {
		c.DumpLogs()
		t.Fatalf("%v; last view: %s", err, last)
	}
	caughtUp(t, ctx, c, 1)

	c.Kill(0)
	sends, acks := tr.SendsAcked.Load(), tr.AcksConfirmed.Load()
	waitFor(t, ctx, "sends and acks with n1 killed", func() bool {
		return tr.SendsAcked.Load() >= sends+30 && tr.AcksConfirmed.Load() >= acks+10
	})
	tr.Stop()
	judge(t, ctx, tr, cl, "topup")
}

// caughtUp waits until every replica has caught up, as an operator checks
// between restarts (docs/operations.md, "Rolling restart").
func caughtUp(t *testing.T, ctx context.Context, c *testcluster.Cluster, i int) {
	t.Helper()
	out, err := exec.CommandContext(ctx, cliBin, "--addr", c.Nodes[i].GRPC, "--timeout", "40s",
		"cluster", "status", "--wait", "30s", "--caught-up").CombinedOutput()
	if err != nil {
		t.Fatalf("raftq cluster status --caught-up via %s: %v\n%s", c.Nodes[i].ID, err, out)
	}
}
