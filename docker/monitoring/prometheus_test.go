package monitoring

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/internal/testcluster"
	"github.com/raftq/raftq/internal/testenv"
)

// mayBeEmpty are dashboard panels whose queries may rightly return
// nothing from a healthy cluster with the test's traffic.
var mayBeEmpty = map[string]string{
	"gRPC errors by code": "no call failed",
}

// testPrometheusEvaluates runs Debian's prometheus against the cluster
// with the alert rules loaded, and checks what promtool cannot: every rule
// evaluates on real series without error (label matching included), the
// alerts that fire are the ones this cluster should fire, and every
// dashboard query runs and, unless its metric is not merged yet, returns
// series.
func testPrometheusEvaluates(t *testing.T, c *testcluster.Cluster) {
	testenv.RequireTools(t, "prometheus")
	dir := t.TempDir()
	rules, err := os.ReadFile(filepath.Join(promDir, rulesFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, rulesFile), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, n := range c.Nodes {
		targets = append(targets, fmt.Sprintf("%q", n.HTTP))
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%s]
scrape_configs:
  - job_name: raftq
    static_configs:
      - targets: [%s]
`, rulesFile, strings.Join(targets, ", "))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + testcluster.FreePorts(t, 1)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.CommandContext(ctx, "prometheus",
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("prometheus log:\n%s", b)
		}
	}()
	base := "http://" + addr

	// Every node scraped a few times, so rates have two samples.
	waitFor(ctx, t, "three nodes up for 4 s", func() (bool, string) {
		res, err := query(ctx, base, `count(min_over_time(up{job="raftq"}[4s]) == 1) == 3 and count(count_over_time(up{job="raftq"}[1m]) >= 4) == 3`)
		return err == nil && len(res) == 1, fmt.Sprint(res, err)
	})

	// Every rule evaluated, and without error.
	var groups []ruleGroup
	waitFor(ctx, t, "every rule evaluated", func() (bool, string) {
		groups, err = rulesState(ctx, base)
		if err != nil {
			return false, err.Error()
		}
		for _, g := range groups {
			for _, r := range g.Rules {
				if r.Health == "unknown" || r.Health == "" {
					return false, r.Name + " not evaluated yet"
				}
			}
		}
		return true, ""
	})
	n := 0
	firing := map[string][]string{}
	for _, g := range groups {
		for _, r := range g.Rules {
			n++
			if r.Health != "ok" {
				t.Errorf("rule %s: health %s: %s", r.Name, r.Health, r.LastError)
			}
			for _, a := range r.Alerts {
				if a.State == "firing" {
					firing[r.Name] = append(firing[r.Name], a.Labels["instance"])
				}
			}
		}
	}
	if want := len(alertRules(t)); n != want {
		t.Errorf("prometheus loaded %d rules, the file has %d alerts", n, want)
	}
	// testcluster's certificates are good for a day (internal/testcluster,
	// certValid), so both certificate alerts fire for every node, and
	// nothing else fires on a healthy cluster.
	want := map[string][]string{}
	var nodes []string
	for _, nd := range c.Nodes {
		nodes = append(nodes, nd.HTTP)
	}
	sort.Strings(nodes)
	want["RaftqCertificateExpiringSoon"] = nodes
	want["RaftqCertificateExpiring"] = nodes
	for name := range firing {
		sort.Strings(firing[name])
	}
	if fmt.Sprint(firing) != fmt.Sprint(want) {
		t.Errorf("firing alerts %v, want %v", firing, want)
	}

	// Every dashboard query runs; all but a few return series.
	vars := strings.NewReplacer("$__rate_interval", "1m", "$job", "raftq", "$queue", ".*")
	for where, expr := range dashboardExprs(t, readDashboard(t)) {
		res, err := query(ctx, base, vars.Replace(expr))
		if err != nil {
			t.Errorf("%s: %v: %s", where, err, expr)
			continue
		}
		if len(res) > 0 {
			continue
		}
		if reason, ok := mayBeEmpty[panelTitle(where)]; ok {
			t.Logf("%s: no series (%s)", where, reason)
			continue
		}
		t.Errorf("%s returned no series: %s", where, expr)
	}
}

// panelTitle takes the title out of a dashboardExprs key.
func panelTitle(where string) string {
	_, rest, ok := strings.Cut(where, `"`)
	if !ok {
		return ""
	}
	title, _, _ := strings.Cut(rest, `"`)
	return title
}

func waitFor(ctx context.Context, t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	last := ""
	for {
		ok, why := cond()
		if ok {
			return
		}
		last = why
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v (last: %s)", what, ctx.Err(), last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

type apiResponse struct {
	Status string          `json:"status"`
	Error  string          `json:"error"`
	Data   json.RawMessage `json:"data"`
}

func getAPI(ctx context.Context, u string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var r apiResponse
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return fmt.Errorf("%s: %s: %w", u, resp.Status, err)
	}
	if r.Status != "success" {
		return fmt.Errorf("%s", r.Error)
	}
	return json.Unmarshal(r.Data, into)
}

// query runs an instant query and returns its series' label sets (a
// scalar result counts as one).
func query(ctx context.Context, base, expr string) ([]map[string]string, error) {
	var d struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := getAPI(ctx, base+"/api/v1/query?query="+url.QueryEscape(expr), &d); err != nil {
		return nil, err
	}
	if d.ResultType == "scalar" || d.ResultType == "string" {
		return []map[string]string{{}}, nil
	}
	var series []struct {
		Metric map[string]string `json:"metric"`
	}
	if err := json.Unmarshal(d.Result, &series); err != nil {
		return nil, err
	}
	out := make([]map[string]string, len(series))
	for i, s := range series {
		out[i] = s.Metric
	}
	return out, nil
}

type ruleGroup struct {
	Name  string `json:"name"`
	Rules []struct {
		Name      string `json:"name"`
		Health    string `json:"health"`
		LastError string `json:"lastError"`
		Alerts    []struct {
			State  string            `json:"state"`
			Labels map[string]string `json:"labels"`
		} `json:"alerts"`
	} `json:"rules"`
}

func rulesState(ctx context.Context, base string) ([]ruleGroup, error) {
	var d struct {
		Groups []ruleGroup `json:"groups"`
	}
	err := getAPI(ctx, base+"/api/v1/rules", &d)
	return d.Groups, err
}
