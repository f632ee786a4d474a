package systest

import (
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/internal/ledger"
	"github.com/raftq/raftq/internal/testcluster"
)

// replace-node n3 n4 under load, and n4 dies (SIGSTOP, so it never
// catches up, then kill -9) while its move is in add. After the dead-node
// grace the meta leader aborts the move: n4 leaves the shard's group and
// the map and the replace is cancelled, so nothing is stuck: the dead n4
// is itself retired, a second replace of n3 onto a fresh n5 completes,
// and the ledger finds nothing acknowledged lost.
func TestMoveAbort_TargetDiesDuringAdd(t *testing.T) {
	t.Parallel() // see the package comment
	c := startCluster(t, testcluster.Options{Shards: 1, Args: []string{"--dead-node-grace", deadGrace}})
	cl := dialLedgerClient(t, c)
	const queue = "abortmove"
	createLedgerQueue(t, cl, queue)
	ctx := ctxT(t, 4*time.Minute)
	tr := ledger.NewTraffic(ctx, ledger.New(ledgerVisibility), cl, queue)
	for p := range 2 {
		tr.Producer(fmt.Sprintf("p%d", p), ledger.ProducerOptions{DedupKeys: true, Groups: 8})
	}
	tr.Consumer("c0", 10)
	t.Cleanup(tr.Stop)
	waitFor(t, ctx, "traffic", func() bool { return tr.SendsAcked.Load() >= 50 && tr.AcksConfirmed.Load() >= 20 })

	n4 := c.AddNode()
	waitFor(t, ctx, "n4 a live meta nonvoter", func() bool {
		n, ok := nodesViewOrNil(ctx, cl)["n4"]
		return ok && n.State == "alive" && n.Meta == "nonvoter"
	})
	if _, err := cl.ReplaceNode(ctx, "n3", "n4"); err != nil {
		t.Fatal(err)
	}
	// Frozen at once, before the executor's first round: the move starts
	// (gossip still lists n4) but n4 never reports catching up.
	c.Signal(n4, syscall.SIGSTOP)
	waitFor(t, ctx, "the move onto n4 in add", func() bool {
		d, err := cl.ReplaceNode(ctx, "n3", "n4")
		return err == nil && d.Moving == "shard 0: n3 -> n4 (add)"
	})
	c.Kill(n4)
	killed := time.Now()
	t.Log("n4 frozen then killed -9 while its move was in add")

	waitFor(t, ctx, "the move aborted and the replace cancelled", func() bool {
		v := nodesViewOrNil(ctx, cl)
		return v != nil && len(v["n4"].Replicas) == 0 && !v["n3"].Draining && slices.Equal(v["n3"].Replicas, []uint32{0})
	})
	if took := time.Since(killed); took < 4*time.Second {
		t.Fatalf("aborted %v after the kill, before the grace", took)
	}
	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leaderLog := logOf(t, c, slices.IndexFunc(c.Nodes, func(n *testcluster.Node) bool { return n.ID == st.MetaLeaderID }))
	for _, want := range []string{"replica move: aborting", "replica move: aborted; the new replica left the group"} {
		if !strings.Contains(leaderLog, want) {
			t.Errorf("the meta leader's log lacks %q:\n%s", want, grepLines(leaderLog, "replica move"))
		}
	}
	// Nothing left to cancel: a clear NOT_FOUND, and a bad shard number
	// is INVALID_ARGUMENT.
	_, err = cl.CancelMove(ctx, 0)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != codes.NotFound || !strings.Contains(ce.Msg, "no replica move is running on shard 0") {
		t.Errorf("cancel with no move: %v", err)
	}
	if _, err = cl.CancelMove(ctx, 7); !errors.As(err, &ce) || ce.Code != codes.InvalidArgument || !strings.Contains(ce.Msg, "no shard 7") {
		t.Errorf("cancel of shard 7: %v", err)
	}

	// Not stuck: the dead n4 is retired, and n3 is replaced onto n5.
	waitFor(t, ctx, "the dead n4 retired", func() bool {
		v, ok := nodesViewOrNil(ctx, cl)["n4"]
		return ok && v.Retired
	})
	c.AddNode()
	waitFor(t, ctx, "n5 a live meta nonvoter", func() bool {
		n, ok := nodesViewOrNil(ctx, cl)["n5"]
		return ok && n.State == "alive" && n.Meta == "nonvoter"
	})
	out, err := exec.CommandContext(ctx, cliBin, "--addr", c.Nodes[0].GRPC, "cluster", "replace-node", "n3", "n5", "--wait", "2m").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "node n3 drained, removed and retired") {
		c.DumpLogs()
		t.Fatalf("second replace-node: %v\n%s", err, out)
	}
	v := nodesView(t, ctx, cl)
	for _, id := range []string{"n1", "n2", "n5"} {
		if !slices.Equal(v[id].Replicas, []uint32{0}) || v[id].Meta != "voter" {
			t.Errorf("%s after the replace: %+v", id, v[id])
		}
	}
	out, err = exec.CommandContext(ctx, cliBin, "--addr", c.Nodes[0].GRPC, "cluster", "move", "cancel", "0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "no replica move is running on shard 0") {
		t.Errorf("raftq cluster move cancel 0 with no move: %v\n%s", err, out)
	}

	sends := tr.SendsAcked.Load()
	waitFor(t, ctx, "sends after the replacement", func() bool { return tr.SendsAcked.Load() >= sends+50 })
	if err := c.Stop(2, 20*time.Second); err != nil {
		t.Logf("stop n3: %v", err)
	}
	tr.Stop()
	judge(t, ctx, tr, cl, queue)
}

// `raftq cluster move cancel 0` aborts a replace's move stuck in add (its
// target frozen), the replace is cancelled, and the target, back, closes
// its copy; replacing onto it again then completes. A cancel once the new
// replica is promoted is refused: the move can only finish.
func TestMoveAbort_CancelByHand(t *testing.T) {
	t.Parallel() // see the package comment
	c := startCluster(t, testcluster.Options{Shards: 1})
	cl := dialLedgerClient(t, c)
	ctx := ctxT(t, 3*time.Minute)
	n4 := c.AddNode()
	waitFor(t, ctx, "n4 a live meta nonvoter", func() bool {
		n, ok := nodesViewOrNil(ctx, cl)["n4"]
		return ok && n.State == "alive" && n.Meta == "nonvoter"
	})
	if _, err := cl.ReplaceNode(ctx, "n3", "n4"); err != nil {
		t.Fatal(err)
	}
	c.Signal(n4, syscall.SIGSTOP)
	waitFor(t, ctx, "the move onto n4 in add", func() bool {
		d, err := cl.ReplaceNode(ctx, "n3", "n4")
		return err == nil && d.Moving == "shard 0: n3 -> n4 (add)"
	})
	out, err := exec.CommandContext(ctx, cliBin, "--addr", c.Nodes[0].GRPC, "cluster", "move", "cancel", "0").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "move of shard 0 from n3 to n4 abort") {
		t.Fatalf("move cancel: %v\n%s", err, out)
	}
	waitFor(t, ctx, "the move aborted and the replace cancelled", func() bool {
		v := nodesViewOrNil(ctx, cl)
		return v != nil && len(v["n4"].Replicas) == 0 && !v["n3"].Draining && slices.Equal(v["n3"].Replicas, []uint32{0})
	})
	c.Signal(n4, syscall.SIGCONT)
	waitFor(t, ctx, "n4 back, its copy closed", func() bool {
		v, ok := nodesViewOrNil(ctx, cl)["n4"]
		return ok && v.State == "alive" && !v.Retired && len(localShardMetrics(t, ctx, c, n4)) == 0
	})

	if _, err := cl.ReplaceNode(ctx, "n3", "n4"); err != nil {
		t.Fatal(err)
	}
	var phase string
	waitFor(t, ctx, "the new move past add", func() bool {
		d, err := cl.ReplaceNode(ctx, "n3", "n4")
		phase = d.Moving
		return err == nil && (strings.HasSuffix(d.Moving, "(promote)") || strings.HasSuffix(d.Moving, "(remove)"))
	})
	_, err = cl.CancelMove(ctx, 0)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != codes.FailedPrecondition || !strings.Contains(ce.Msg, "n4 votes already, so the move can only finish") {
		t.Errorf("cancel at %q: %v", phase, err)
	}
	waitFor(t, ctx, "n3 replaced by n4", func() bool {
		d, err := cl.ReplaceNode(ctx, "n3", "n4")
		return err == nil && d.Done
	})
	if v := nodesView(t, ctx, cl)["n4"]; !slices.Equal(v.Replicas, []uint32{0}) || v.Meta != "voter" {
		t.Errorf("n4 after the replace: %+v", v)
	}
}
