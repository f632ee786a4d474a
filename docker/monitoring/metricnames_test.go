package monitoring

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/internal/testcluster"
)

var nodeBin string

func TestMain(m *testing.M) { testcluster.Main(m, &nodeBin) }

// faultOnlyMetrics are exported only while something is wrong (a
// damaged replica), so a healthy cluster cannot show them; the test
// finds their names in the node's metric code instead.
var faultOnlyMetrics = map[string]string{
	"raftq_replica_damaged": "../../metrics/integrity.go",
}

// prometheusMetrics are series Prometheus makes itself for each target.
var prometheusMetrics = map[string]bool{"up": true}

// unknownMetrics returns the names in used that are neither in exported
// (sample names of a scrape) nor accounted for by the lists above.
func unknownMetrics(t *testing.T, used map[string][]string, exported map[string]bool) []string {
	t.Helper()
	var out []string
	for name, where := range used {
		switch {
		case exported[name], prometheusMetrics[name]:
			continue
		case faultOnlyMetrics[name] != "":
			src, err := os.ReadFile(faultOnlyMetrics[name])
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(src), `"`+name+`"`) {
				continue
			}
		}
		out = append(out, fmt.Sprintf("%s (in %s)", name, strings.Join(where, "; ")))
	}
	sort.Strings(out)
	return out
}

// usedMetrics returns every metric name the alert rules and the dashboard
// use, with where each is used.
func usedMetrics(t *testing.T) map[string][]string {
	t.Helper()
	used := map[string][]string{}
	add := func(where, expr string) {
		names, err := metricNames(expr)
		if err != nil {
			t.Fatalf("%s: %v: %s", where, err, expr)
		}
		for _, n := range names {
			used[n] = append(used[n], where)
		}
	}
	for _, r := range alertRules(t) {
		add("alert "+r.Alert, r.Expr)
	}
	for where, expr := range dashboardExprs(t, readDashboard(t)) {
		add("dashboard "+where, expr)
	}
	return used
}

// scrapeNames returns the sample names of a Prometheus text exposition.
func scrapeNames(r io.Reader, into map[string]bool) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			into[line[:i]] = true
		}
	}
	return sc.Err()
}

func scrapeNode(ctx context.Context, addr string, into map[string]bool) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("scrape %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("scrape %s: %s", addr, resp.Status)
	}
	return scrapeNames(resp.Body, into)
}

// traffic sends, receives, acks, nacks and dead-letters on a new queue,
// so the queue-labelled series exist.
func traffic(ctx context.Context, t *testing.T, c *testcluster.Cluster) {
	t.Helper()
	cl, err := client.Dial(ctx, c.Addrs(), client.WithTLS(c.ClientCreds()))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer cl.Close()
	const queue = "monitored"
	for {
		_, err := cl.CreateQueue(ctx, queue, client.QueueOptions{MaxReceives: 2})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("create queue: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	const sent = 8
	for i := range sent {
		if _, err := cl.Send(ctx, queue, []byte(fmt.Sprintf("m%d", i))); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	// The second is deduplicated.
	for range 2 {
		if _, err := cl.Send(ctx, queue, []byte("once"), client.DedupKey("once")); err != nil {
			t.Fatalf("send with a dedup key: %v", err)
		}
	}
	var got []*client.Message
	for len(got) < 4 {
		ms, err := cl.Receive(ctx, queue, client.ReceiveOptions{Max: 4 - len(got), Wait: time.Second})
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		got = append(got, ms...)
	}
	if err := cl.Ack(ctx, got[0].Receipt); err != nil {
		t.Fatalf("ack: %v", err)
	}
	if err := cl.Nack(ctx, got[1].Receipt, client.NackOptions{ReadyNow: true, Error: "monitoring test"}); err != nil {
		t.Fatalf("nack: %v", err)
	}
	if err := cl.DeadLetter(ctx, got[2].Receipt, "monitoring test"); err != nil {
		t.Fatalf("dead-letter: %v", err)
	}
	// got[3] stays leased.
}

// TestOnARealCluster runs one cluster, with some traffic, for the checks
// that need real series.
func TestOnARealCluster(t *testing.T) {
	// TLS, so the certificate expiry gauge is exported.
	c := testcluster.Start(t, nodeBin, testcluster.Options{Shards: 2, TLS: true})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	traffic(ctx, t, c)
	t.Run("MetricNamesExist", func(t *testing.T) { testMetricNamesExist(ctx, t, c) })
	t.Run("PrometheusEvaluates", func(t *testing.T) { testPrometheusEvaluates(t, c) })
}

// testMetricNamesExist checks that every metric the alert rules and the
// dashboard name is one the cluster exports.
func testMetricNamesExist(ctx context.Context, t *testing.T, c *testcluster.Cluster) {
	used := usedMetrics(t)
	exported := map[string]bool{}
	for _, n := range c.Nodes {
		if err := scrapeNode(ctx, n.HTTP, exported); err != nil {
			t.Fatal(err)
		}
	}
	// The scrape itself must be the real thing, or every name would pass
	// through the lists above.
	for _, must := range []string{"raftq_shard_is_leader", "raftq_queue_messages", "raftq_messages_total", "raftq_tls_cert_expiry_timestamp_seconds", "raftq_shard_propose_seconds_bucket"} {
		if !exported[must] {
			t.Fatalf("the scrape lacks %s", must)
		}
	}
	if unknown := unknownMetrics(t, used, exported); len(unknown) > 0 {
		t.Errorf("metrics no node exports:\n  %s", strings.Join(unknown, "\n  "))
	}
	// A name nobody exports is caught, whether plain or a histogram's.
	for _, bad := range []string{"raftq_shard_is_leadr", "raftq_disk_sync_secondz_bucket", "raftq_replica_damagd"} {
		if u := unknownMetrics(t, map[string][]string{bad: {"a misspelt query"}}, exported); len(u) != 1 {
			t.Errorf("misspelt %s was not reported (got %v)", bad, u)
		}
	}
}

func TestScrapeNames(t *testing.T) {
	got := map[string]bool{}
	page := "# HELP a_seconds x\n# TYPE a_seconds histogram\na_seconds_bucket{le=\"1\"} 1\na_seconds_sum 1\nup 1\n\n"
	if err := scrapeNames(strings.NewReader(page), got); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"a_seconds_bucket", "a_seconds_sum", "up"} {
		if !got[want] {
			t.Errorf("no %s in %v", want, got)
		}
	}
	if got["a_seconds"] {
		t.Errorf("a HELP line became a sample name")
	}
	if _, err := os.Stat(filepath.Join(repoRoot, "go.mod")); errors.Is(err, os.ErrNotExist) {
		t.Fatalf("repoRoot %s is not the module root", repoRoot)
	}
}
