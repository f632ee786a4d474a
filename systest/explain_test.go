package systest

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/internal/testcluster"
)

// scrapeAll concatenates /metrics of every node.
func scrapeAll(t *testing.T, c *testcluster.Cluster) string {
	t.Helper()
	var all strings.Builder
	for _, n := range c.Nodes {
		resp, err := http.Get("http://" + n.HTTP + "/metrics")
		if err != nil {
			t.Fatalf("scrape %s: %v", n.ID, err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		all.Write(b)
	}
	return all.String()
}

// sumSeries adds the values of every line of text for exactly series
// (name and labels as Prometheus prints them).
func sumSeries(text, series string) float64 {
	var sum float64
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			sum += f
		}
	}
	return sum
}

// The metrics of real nodes explain what happened to messages: a nack, a
// lease expiry and an ack are counted once over the cluster with their
// queue; raft's own timings and the build are on /metrics; a node started
// with --log-format json logs JSON lines; the binary answers --version.
func TestCluster_MetricsExplainMoves(t *testing.T) {
	c := startCluster(t, testcluster.Options{NodeArgs: [][]string{{"--log-format", "json"}}})
	mustCreateQueue(t, c, "explained", nil)
	ctx := ctxT(t, 60*time.Second)
	// Moves are counted by a shard's leader alone: wait until every shard
	// has handed its leadership to its preferred replica (the first
	// listed), as a new shard does soon after it forms, so no hand-off
	// falls between the moves and the scrape.
	for {
		st, err := raftqv1.NewClusterClient(c.Conn(0)).Status(ctx, &raftqv1.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		settled := len(st.GetShards()) > 0
		for _, sh := range st.GetShards() {
			settled = settled && len(sh.GetReplicas()) > 0 && sh.GetLeaderId() == sh.GetReplicas()[0]
		}
		if settled {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the shards never settled on their preferred replicas: %v", st.GetShards())
		case <-time.After(200 * time.Millisecond):
		}
	}
	for range 3 {
		if _, err := msgs(c, 0).Send(ctx, &raftqv1.SendRequest{Queue: "explained", Body: []byte("x")}); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	receive := func(visMs int64) string {
		t.Helper()
		resp, err := msgs(c, 1).Receive(ctx, &raftqv1.ReceiveRequest{Queue: "explained", MaxMessages: 1, WaitMs: 5000, VisibilityTimeoutMs: visMs})
		if err != nil || len(resp.GetMessages()) != 1 {
			t.Fatalf("receive: %v, %d messages", err, len(resp.GetMessages()))
		}
		return resp.GetMessages()[0].GetReceipt()
	}
	if _, err := msgs(c, 1).Nack(ctx, &raftqv1.NackRequest{Receipt: receive(60_000), HasDelay: true, DelayMs: 60_000}); err != nil {
		t.Fatalf("nack: %v", err)
	}
	_ = receive(300) // left to expire
	if _, err := msgs(c, 2).Ack(ctx, &raftqv1.AckRequest{Receipts: []string{receive(60_000)}}); err != nil {
		t.Fatalf("ack: %v", err)
	}

	want := map[string]float64{
		`raftq_queue_transitions_total{queue="explained",reason="nacked"}`:        1,
		`raftq_queue_transitions_total{queue="explained",reason="lease_expired"}`: 1,
		`raftq_messages_total{event="nacked",queue="explained"}`:                  1,
		`raftq_messages_total{event="acked",queue="explained"}`:                   1,
	}
	var text string
	for deadline := time.Now().Add(30 * time.Second); ; {
		text = scrapeAll(t, c)
		ok := true
		for s, v := range want {
			ok = ok && sumSeries(text, s) == v
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			for s, v := range want {
				t.Errorf("%s sums to %v over the nodes, want %v", s, sumSeries(text, s), v)
			}
			t.FailNow()
		}
		time.Sleep(200 * time.Millisecond)
	}
	if n := sumSeries(text, `raftq_disk_sync_seconds_count{store="wal"}`); n == 0 {
		t.Error("no raft log fsync timed on any node")
	}
	if strings.Contains(text, `queue=""`) {
		t.Error(`a series has queue="": every message event names its queue`)
	}
	for _, s := range []string{
		"raftq_raft_internal_commitTime_count", "raftq_raft_internal_fsm_applyBatch_count",
		"raftq_raft_internal_rpc_appendEntries_count", `raftq_raft_internal_replication_appendEntries_rpc_count{peer_id=`,
		"raftq_build_info{commit=", `raftq_disk_sync_seconds_count{store="wal"}`, `raftq_disk_free_bytes{dir=`,
	} {
		if !strings.Contains(text, s) {
			t.Errorf("/metrics lacks %s", s)
		}
	}

	// docs/metrics.md is the reference: every family the node exports is
	// in it (raft's own under their prefix, which the page lists).
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(text, "\n") {
		name, ok := strings.CutPrefix(l, "# TYPE ")
		if !ok {
			continue
		}
		name, _, _ = strings.Cut(name, " ")
		if !strings.HasPrefix(name, "raftq_") || strings.HasPrefix(name, "raftq_raft_internal_") || strings.HasPrefix(name, "raftq_gossip_internal_") {
			continue
		}
		if !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("docs/metrics.md does not describe %s", name)
		}
	}

	for bin, name := range map[string]string{nodeBin: "raftq-node", cliBin: "raftq"} {
		out, err := exec.Command(bin, "--version").Output()
		if err != nil || !strings.HasPrefix(string(out), name+" ") || !strings.Contains(string(out), "(commit ") {
			t.Errorf("%s --version: %q, %v", name, out, err)
		}
	}

	f, err := os.Open(c.Nodes[0].LogPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	lines := 0
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "=== testcluster:") {
			continue // the harness's own marks between starts
		}
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil || rec["msg"] == nil || rec["level"] == nil {
			t.Fatalf("log line of the --log-format json node is not a JSON record: %q (%v)", sc.Text(), err)
		}
		lines++
	}
	if lines == 0 {
		t.Fatal("the --log-format json node logged nothing")
	}
}
