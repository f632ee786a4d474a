package systest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/internal/ledger"
	"github.com/raftq/raftq/internal/testcluster"
)

// deadGrace is the --dead-node-grace of these tests: the shortest allowed.
const deadGrace = "5s"

// A node killed (-9) on a 4-node cluster stays away past the grace: the
// meta leader drains it, its replicas are re-created on the three others,
// the load goes on with nothing lost, and its id is retired. Restarted
// from its old directory it says in its own log that it was retired and
// holds nothing.
func TestDeadNode_ReplacedAfterGrace(t *testing.T) {
	t.Parallel() // see the package comment
	c := startCluster(t, testcluster.Options{Nodes: 4, Shards: 2, Args: []string{"--dead-node-grace", deadGrace}})
	cl := dialLedgerClient(t, c)
	const queue = "deadnode"
	createLedgerQueue(t, cl, queue)
	ctx := ctxT(t, 3*time.Minute)
	tr := ledger.NewTraffic(ctx, ledger.New(ledgerVisibility), cl, queue)
	for p := range 2 {
		tr.Producer(fmt.Sprintf("p%d", p), ledger.ProducerOptions{DedupKeys: true, Groups: 8})
	}
	tr.Consumer("c0", 10)
	t.Cleanup(tr.Stop)
	waitFor(t, ctx, "traffic", func() bool { return tr.SendsAcked.Load() >= 50 && tr.AcksConfirmed.Load() >= 20 })

	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	nodes := nodesView(t, ctx, cl)
	// The victim: not the meta leader (its successor would only start the
	// clock afresh), holding the most replicas.
	victim := -1
	for i, n := range c.Nodes {
		if n.ID == st.MetaLeaderID {
			continue
		}
		if victim < 0 || len(nodes[n.ID].Replicas) > len(nodes[c.Nodes[victim].ID].Replicas) {
			victim = i
		}
	}
	vid := c.Nodes[victim].ID
	held := nodes[vid].Replicas
	if open := localShardMetrics(t, ctx, c, victim); len(open) != len(held) {
		t.Fatalf("%s holds %v but its metrics show %v", vid, held, open)
	}
	c.Kill(victim)
	killed := time.Now()
	t.Logf("kill -9 %s (replicas %v); meta leader %s", vid, held, st.MetaLeaderID)

	var last map[string]client.NodeInfo
	waitFor(t, ctx, vid+" replaced: retired, out of meta, every shard on 3 live nodes", func() bool {
		last = nodesViewOrNil(ctx, cl)
		if last == nil {
			return false
		}
		v := last[vid]
		if !v.Retired || v.Meta != "" || len(v.Replicas) != 0 {
			return false
		}
		count := map[uint32]int{}
		for id, n := range last {
			if id == vid {
				continue
			}
			for _, s := range n.Replicas {
				count[s]++
			}
		}
		return count[0] == 3 && count[1] == 3
	})
	took := time.Since(killed)
	t.Logf("%s replaced %v after the kill; view: %v", vid, took.Round(time.Second), last)
	if took < 5*time.Second {
		t.Fatalf("%s was replaced %v after the kill, before the grace", vid, took)
	}
	leaderLog := logOf(t, c, slices.IndexFunc(c.Nodes, func(n *testcluster.Node) bool { return n.ID == st.MetaLeaderID }))
	for _, want := range []string{"dead node: replacing it", "replica move: done", "node drained, removed and retired"} {
		if !strings.Contains(leaderLog, want) {
			t.Errorf("the meta leader's log lacks %q", want)
		}
	}

	sends := tr.SendsAcked.Load()
	waitFor(t, ctx, "sends after the replacement", func() bool { return tr.SendsAcked.Load() >= sends+50 })

	// The old node returns with its old directory: it is refused, says so
	// itself, and opens nothing.
	from := logSize(t, c, victim)
	c.Restart(victim)
	waitFor(t, ctx, vid+" says it was retired", func() bool {
		return strings.Contains(logOf(t, c, victim)[from:], "this node's id was retired from the cluster")
	})
	time.Sleep(2 * time.Second) // let it close what it opened
	own := logOf(t, c, victim)[from:]
	if !strings.Contains(own, "level=ERROR") || strings.Count(own, "this node's id was retired") != 1 {
		t.Errorf("%s's retirement is not one ERROR line:\n%s", vid, own)
	}
	t.Logf("%s's own log after its return:\n%s", vid, tailLines(own, 25))
	if open := localShardMetrics(t, ctx, c, victim); len(open) != 0 {
		t.Errorf("retired %s still hosts replicas: %v", vid, open)
	}
	if v := nodesView(t, ctx, cl)[vid]; !v.Retired || len(v.Replicas) != 0 || v.Meta != "" {
		t.Errorf("after its return %s is %+v", vid, v)
	}
	// Asked directly, it refuses: its view is stale for good.
	if _, err := raftqv1.NewClusterClient(c.Conn(victim)).Nodes(ctx, &raftqv1.NodesRequest{}); status.Code(err) != codes.Unavailable ||
		!strings.Contains(err.Error(), "node "+vid+" was retired from the cluster") {
		t.Errorf("cluster nodes at the retired %s: %v", vid, err)
	}
	// Wiped, under the same id, it is still refused: a retired id never
	// rejoins, even as a fresh replica.
	if err := c.Stop(victim, 20*time.Second); err != nil {
		t.Logf("stop %s: %v", vid, err)
	}
	if err := os.RemoveAll(c.Nodes[victim].Dir); err != nil {
		t.Fatal(err)
	}
	from = logSize(t, c, victim)
	c.Restart(victim)
	waitFor(t, ctx, vid+", wiped, says it was retired", func() bool {
		return strings.Contains(logOf(t, c, victim)[from:], "this node's id was retired from the cluster")
	})
	if open := localShardMetrics(t, ctx, c, victim); len(open) != 0 {
		t.Errorf("retired and wiped %s hosts replicas: %v", vid, open)
	}
	if v := nodesView(t, ctx, cl)[vid]; !v.Retired || len(v.Replicas) != 0 || v.Meta != "" {
		t.Errorf("after its wiped return %s is %+v", vid, v)
	}
	_ = c.Stop(victim, 20*time.Second)
	tr.Stop()
	judge(t, ctx, tr, cl, queue)
}

// On a 3-node cluster with 3 replicas per shard no node can take a dead
// node's replicas: nothing is drained, the meta leader says why, and the
// node, back, carries on as a member.
func TestDeadNode_NotReplacedWithoutEnoughNodes(t *testing.T) {
	t.Parallel() // see the package comment
	c := startCluster(t, testcluster.Options{Shards: 1, Args: []string{"--dead-node-grace", deadGrace}})
	cl := dialLedgerClient(t, c)
	ctx := ctxT(t, 90*time.Second)
	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	victim := slices.IndexFunc(c.Nodes, func(n *testcluster.Node) bool { return n.ID != st.MetaLeaderID })
	leader := slices.IndexFunc(c.Nodes, func(n *testcluster.Node) bool { return n.ID == st.MetaLeaderID })
	vid := c.Nodes[victim].ID
	from := logSize(t, c, leader)
	c.Kill(victim)
	waitFor(t, ctx, "the meta leader says it cannot replace "+vid, func() bool {
		return strings.Contains(logOf(t, c, leader)[from:], "dead node: cannot replace it")
	})
	said := logOf(t, c, leader)[from:]
	if !strings.Contains(said, "no live node can take shard 0") || !strings.Contains(said, "member="+vid) {
		t.Errorf("the refusal does not say why:\n%s", said)
	}
	t.Logf("meta leader:\n%s", grepLines(said, "dead node"))
	// Rate-limited: one line in the next few seconds, not one per round.
	time.Sleep(3 * time.Second)
	if k := strings.Count(logOf(t, c, leader)[from:], "dead node: cannot replace it"); k != 1 {
		t.Errorf("the refusal was logged %d times in a few seconds", k)
	}
	v := nodesView(t, ctx, cl)[vid]
	if v.Retired || v.Draining || !slices.Equal(v.Replicas, []uint32{0}) || v.Meta != "voter" {
		t.Fatalf("%s was touched: %+v", vid, v)
	}
	c.Restart(victim)
	if err := c.WaitServing(ctx, victim); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, vid+" alive again, still a member", func() bool {
		v, ok := nodesViewOrNil(ctx, cl)[vid]
		return ok && v.State == "alive" && !v.Retired && !v.Draining
	})
}

func nodesViewOrNil(ctx context.Context, cl *client.Client) map[string]client.NodeInfo {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ns, err := cl.Nodes(cctx)
	if err != nil {
		return nil
	}
	out := map[string]client.NodeInfo{}
	for _, n := range ns {
		out[n.NodeID] = n
	}
	return out
}

func nodesView(t *testing.T, ctx context.Context, cl *client.Client) map[string]client.NodeInfo {
	t.Helper()
	var out map[string]client.NodeInfo
	waitFor(t, ctx, "cluster nodes", func() bool { out = nodesViewOrNil(ctx, cl); return out != nil })
	return out
}

// localShardMetrics are node i's raftq_shard_term lines: one per replica
// it has open.
func localShardMetrics(t *testing.T, ctx context.Context, c *testcluster.Cluster, i int) []string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.Nodes[i].HTTP+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("metrics of %s: %v", c.Nodes[i].ID, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("metrics of %s: %v", c.Nodes[i].ID, err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "raftq_shard_term{") {
			out = append(out, line)
		}
	}
	return out
}

func logOf(t *testing.T, c *testcluster.Cluster, i int) string {
	t.Helper()
	b, err := os.ReadFile(c.Nodes[i].LogPath)
	if err != nil {
		t.Fatalf("read log: %v", err)
	}
	return string(b)
}

func logSize(t *testing.T, c *testcluster.Cluster, i int) int {
	return len(logOf(t, c, i))
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func grepLines(s, part string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, part) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
