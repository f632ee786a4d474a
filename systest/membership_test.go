package systest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/internal/ledger"
	"github.com/raftq/raftq/internal/testcluster"
)

// replaceRig is 3 nodes with 2 shards, a 4th joined with
// --bootstrap-expect 0, and producers and consumers booking every call in
// a ledger.
type replaceRig struct {
	t   *testing.T
	c   *testcluster.Cluster
	cl  *client.Client
	tr  *ledger.Traffic
	ctx context.Context
	n4  int
}

func newReplaceRig(t *testing.T, queue string) *replaceRig {
	c := startCluster(t, testcluster.Options{Shards: 2})
	cl := dialLedgerClient(t, c)
	createLedgerQueue(t, cl, queue)
	ctx := ctxT(t, 5*time.Minute)
	tr := ledger.NewTraffic(ctx, ledger.New(ledgerVisibility), cl, queue)
	for p := range 3 {
		tr.Producer(fmt.Sprintf("p%d", p), ledger.ProducerOptions{DedupKeys: true, Groups: 8})
	}
	for k := range 2 {
		tr.Consumer(fmt.Sprintf("c%d", k), 10)
	}
	t.Cleanup(tr.Stop)
	waitFor(t, ctx, "traffic", func() bool { return tr.SendsAcked.Load() >= 50 && tr.AcksConfirmed.Load() >= 20 })
	r := &replaceRig{t: t, c: c, cl: cl, tr: tr, ctx: ctx}
	r.n4 = c.AddNode()
	waitFor(t, ctx, "n4 a live meta member", func() bool {
		n, ok := r.node("n4")
		return ok && n.State == "alive" && n.Meta == "nonvoter" && len(n.Replicas) == 0
	})
	return r
}

func (r *replaceRig) node(id string) (client.NodeInfo, bool) {
	ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
	defer cancel()
	ns, err := r.cl.Nodes(ctx)
	if err != nil {
		return client.NodeInfo{}, false
	}
	for _, n := range ns {
		if n.NodeID == id {
			return n, true
		}
	}
	return client.NodeInfo{}, false
}

// replaced waits until n1's view shows the end state: both shards on n1,
// n2 and n4, n3 retired and out of meta, n4 a meta voter; and checks that
// n3, if running, set its replicas aside, which it does only once their
// groups removed it.
func (r *replaceRig) replaced() {
	r.t.Helper()
	var last []*raftqv1.NodeInfo
	ok := func() bool {
		resp, err := raftqv1.NewClusterClient(r.c.Conn(0)).Nodes(r.ctx, &raftqv1.NodesRequest{})
		if err != nil {
			return false
		}
		last = resp.GetNodes()
		for _, n := range last {
			switch n.GetNodeId() {
			case "n3":
				if !n.GetRetired() || n.GetMeta() != "" || len(n.GetReplicas()) != 0 {
					return false
				}
				continue
			case "n4":
				if n.GetMeta() != "voter" {
					return false
				}
			}
			if !slices.Equal(n.GetReplicas(), []uint32{0, 1}) {
				return false
			}
		}
		return len(last) == 4
	}
	ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
	defer cancel()
	if err := ledger.WaitFor(ctx, "n1 sees n3 replaced by n4", ok, 100*time.Millisecond); err != nil {
		r.t.Fatalf("%v; last view: %v", err, last)
	}
	for _, id := range []string{"0", "1"} {
		aside, _ := filepath.Glob(filepath.Join(r.c.Nodes[2].Dir, "shards", id+".removed-*"))
		if r.c.Running(2) && len(aside) != 1 {
			r.t.Errorf("n3's replica of shard %s set aside: %v", id, aside)
		}
	}
}

// finish keeps the traffic going past the change, stops n3 (an operator
// stops the node once it is retired), and judges the ledger: nothing
// acknowledged lost, no message leased twice at once.
func (r *replaceRig) finish(queue string) {
	r.t.Helper()
	sends := r.tr.SendsAcked.Load()
	waitFor(r.t, r.ctx, "sends after the replacement", func() bool { return r.tr.SendsAcked.Load() >= sends+50 })
	if r.c.Running(2) {
		if err := r.c.Stop(2, 20*time.Second); err != nil {
			r.t.Logf("stop n3: %v", err)
		}
	}
	r.tr.Stop()
	judge(r.t, r.ctx, r.tr, r.cl, queue)
}

// `raftq cluster replace-node n3 n4 --wait` under a producer/consumer load
// moves both shards' replicas from n3 to n4 through raft, takes n3 out of
// meta and retires it; the ledger finds nothing lost and no double lease.
func TestMembership_ReplaceNodeUnderLoad(t *testing.T) {
	r := newReplaceRig(t, "replace")
	out, err := exec.CommandContext(r.ctx, cliBin, "--addr", r.c.Nodes[0].GRPC, "cluster", "replace-node", "n3", "n4", "--wait", "3m").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "node n3 drained, removed and retired") {
		r.c.DumpLogs()
		t.Fatalf("replace-node: %v\n%s", err, out)
	}
	r.replaced()
	// Asking again is harmless and says it is done.
	if d, err := r.cl.ReplaceNode(r.ctx, "n3", "n4"); err != nil || !d.Done {
		t.Fatalf("replace again: %+v %v", d, err)
	}
	r.finish("replace")
}

// The meta leader is killed (-9) while a replica move of the replacement
// is under way: the next meta leader resumes the move from its recorded
// phase and the replacement completes, with nothing lost.
func TestMembership_ReplaceResumesAfterMetaLeaderKill(t *testing.T) {
	r := newReplaceRig(t, "replacekill")
	d, err := r.cl.ReplaceNode(r.ctx, "n3", "n4")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, r.ctx, "a move under way", func() bool {
		d, err = r.cl.ReplaceNode(r.ctx, "n3", "n4")
		return err == nil && d.Moving != ""
	})
	st, err := r.cl.Status(r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	victim := slices.IndexFunc(r.c.Nodes, func(n *testcluster.Node) bool { return n.ID == st.MetaLeaderID })
	if victim < 0 {
		t.Fatalf("meta leader %q unknown", st.MetaLeaderID)
	}
	r.c.Kill(victim)
	t.Logf("kill -9 of meta leader %s during %s", st.MetaLeaderID, d.Moving)
	waitFor(t, r.ctx, "the replacement completes under the next meta leader", func() bool {
		d, err := r.cl.ReplaceNode(r.ctx, "n3", "n4")
		return err == nil && d.Done
	})
	if victim != 2 {
		r.c.Restart(victim)
		if err := r.c.WaitServing(r.ctx, victim); err != nil {
			t.Fatal(err)
		}
	}
	r.replaced()
	r.finish("replacekill")
}

// Bad removals get clear statuses: an unknown node is NOT_FOUND, a
// replacement that is not a member and removing a node that would leave
// meta two voters are FAILED_PRECONDITION saying why.
func TestMembership_RemoveNodeRefusals(t *testing.T) {
	c := startCluster(t, testcluster.Options{Shards: 1})
	cl := dialLedgerClient(t, c)
	ctx := ctxT(t, 60*time.Second)
	for _, tc := range []struct {
		name string
		call func() error
		code codes.Code
		says string
	}{
		{"unknown node", func() error { _, err := cl.RemoveNode(ctx, "n9"); return err }, codes.NotFound, "unknown node n9"},
		{"below 3 voters", func() error { _, err := cl.RemoveNode(ctx, "n2"); return err }, codes.FailedPrecondition, "at least 3"},
		{"new not a member", func() error { _, err := cl.ReplaceNode(ctx, "n2", "n9"); return err }, codes.FailedPrecondition, "not a live member"},
		{"same node", func() error { _, err := cl.ReplaceNode(ctx, "n2", "n2"); return err }, codes.InvalidArgument, "both n2"},
	} {
		err := tc.call()
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Code != tc.code || !strings.Contains(ce.Msg, tc.says) {
			t.Errorf("%s: %v, want %v saying %q", tc.name, err, tc.code, tc.says)
		}
	}
}

// `raftq cluster remove-node` of a joined node takes it out of meta and
// retires it; running it again says the same and changes nothing.
func TestMembership_RemoveNodeRetiresIt(t *testing.T) {
	c := startCluster(t, testcluster.Options{Shards: 1})
	cl := dialLedgerClient(t, c)
	ctx := ctxT(t, 2*time.Minute)
	c.AddNode()
	n4Meta := func() string {
		resp, err := raftqv1.NewClusterClient(c.Conn(0)).Nodes(ctx, &raftqv1.NodesRequest{})
		if err != nil {
			return "error"
		}
		for _, n := range resp.GetNodes() {
			if n.GetNodeId() == "n4" {
				if n.GetRetired() {
					return "retired:" + n.GetMeta()
				}
				return n.GetMeta()
			}
		}
		return "absent"
	}
	waitFor(t, ctx, "n4 a meta nonvoter", func() bool { return n4Meta() == "nonvoter" })
	for try := range 2 {
		out, err := exec.CommandContext(ctx, cliBin, "--addr", c.Nodes[0].GRPC, "cluster", "remove-node", "n4", "--wait", "1m").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "node n4 drained, removed and retired") {
			t.Fatalf("remove-node (try %d): %v\n%s", try, err, out)
		}
	}
	waitFor(t, ctx, "n1 sees n4 retired and out of meta", func() bool { return n4Meta() == "retired:" })
	// --wait watches through the node list: one audited call per command,
	// not one per poll, on the node the CLI called (the meta leader logs
	// the calls forwarded to it as well).
	b, err := os.ReadFile(c.Nodes[0].LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if calls := strings.Count(string(b), "method=Cluster/RemoveNode "); calls != 2 {
		t.Fatalf("%d audited RemoveNode calls for two remove-node --wait commands, want 2", calls)
	}
	if d, err := cl.RemoveNode(ctx, "n4"); err != nil || !d.Done {
		t.Fatalf("remove again through the client: %+v %v", d, err)
	}
}
