package monitoring

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/raftq/raftq/internal/testenv"
)

const (
	promDir     = "../prometheus"
	rulesFile   = "raftq-alerts.yml"
	rulesTest   = "raftq-alerts_test.yml"
	repoRoot    = "../.."
	runbookBase = "https://github.com/raftq/raftq/blob/main/"
)

type rule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type ruleTestFile struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		AlertRuleTest []struct {
			EvalTime  string `yaml:"eval_time"`
			Alertname string `yaml:"alertname"`
			ExpAlerts []struct {
				ExpLabels map[string]string `yaml:"exp_labels"`
			} `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// readYAML decodes path into v; strict makes a key v has no field for an
// error (for files whose schema v spells out in full).
func readYAML(t *testing.T, path string, v any, strict bool) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(strict)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func alertRules(t *testing.T) []rule {
	t.Helper()
	var f ruleFile
	readYAML(t, filepath.Join(promDir, rulesFile), &f, true)
	var out []rule
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no alerts", rulesFile)
	}
	return out
}

// promtool runs promtool in dir and returns its combined output.
func promtool(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "promtool", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestAlertRulesCheckAndUnitTestsPass(t *testing.T) {
	testenv.RequireTools(t, "promtool")
	if out, err := promtool(t, promDir, "check", "rules", rulesFile); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	out, err := promtool(t, promDir, "test", "rules", rulesTest)
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	if !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool test rules did not report SUCCESS:\n%s", out)
	}
	// check config also loads the rule files the configuration names.
	if out, err := promtool(t, promDir, "check", "config", "prometheus.yml"); err != nil {
		t.Fatalf("promtool check config: %v\n%s", err, out)
	}
}

// TestAlertUnitTestsCatchABrokenRule shows the unit tests bite both ways:
// a rule that no longer fires, and a rule that fires where it should not,
// each make promtool test rules fail.
func TestAlertUnitTestsCatchABrokenRule(t *testing.T) {
	testenv.RequireTools(t, "promtool")
	orig, err := os.ReadFile(filepath.Join(promDir, rulesFile))
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join(promDir, rulesTest))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		old, new, alert string
	}{
		{"max by (queue) (raftq_queue_oldest_ready_age_seconds) > 300", "max by (queue) (raftq_queue_oldest_ready_age_seconds) > 3000", "RaftqOldestReadyMessageTooOld"},
		{"raftq_disk_free_bytes / raftq_disk_total_bytes < 0.10", "raftq_disk_free_bytes / raftq_disk_total_bytes < 0.60", "RaftqDiskAlmostFull"},
		{"expr: max by (shard) (raftq_shard_is_leader) < 1\n        for: 1m", "expr: max by (shard) (raftq_shard_is_leader) < 1\n        for: 0m", "RaftqShardNoLeader"},
	} {
		if !bytes.Contains(orig, []byte(tc.old)) {
			t.Fatalf("%s no longer contains %q: update this test", rulesFile, tc.old)
		}
		dir := t.TempDir()
		mutated := bytes.Replace(orig, []byte(tc.old), []byte(tc.new), 1)
		if err := os.WriteFile(filepath.Join(dir, rulesFile), mutated, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, rulesTest), tests, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := promtool(t, dir, "test", "rules", rulesTest)
		if err == nil {
			t.Errorf("promtool test rules passed with %q changed to %q", tc.old, tc.new)
			continue
		}
		if !strings.Contains(out, "alertname: "+tc.alert) {
			t.Errorf("with %q changed, promtool did not name %s:\n%s", tc.old, tc.alert, out)
		}
	}
}

// TestAlertsAreComplete holds every alert to what an operator needs from
// it: a severity, a summary, a description, a runbook section that exists,
// and unit tests in which it both fires and stays quiet.
func TestAlertsAreComplete(t *testing.T) {
	var tf ruleTestFile
	readYAML(t, filepath.Join(promDir, rulesTest), &tf, false)
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tf.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	names := map[string]bool{}
	for _, r := range alertRules(t) {
		if names[r.Alert] {
			t.Errorf("alert %s defined twice", r.Alert)
		}
		names[r.Alert] = true
		if s := r.Labels["severity"]; s != "warning" && s != "critical" {
			t.Errorf("%s: severity %q, want warning or critical", r.Alert, s)
		}
		for _, k := range []string{"summary", "description", "runbook_url"} {
			if strings.TrimSpace(r.Annotations[k]) == "" {
				t.Errorf("%s: no %s annotation", r.Alert, k)
			}
		}
		if err := checkRunbook(r.Annotations["runbook_url"]); err != "" {
			t.Errorf("%s: %s", r.Alert, err)
		}
		if !fires[r.Alert] {
			t.Errorf("%s: no unit test in %s expects it to fire", r.Alert, rulesTest)
		}
		if !quiet[r.Alert] {
			t.Errorf("%s: no unit test in %s expects it to stay quiet", r.Alert, rulesTest)
		}
	}
	for name := range fires {
		if !names[name] {
			t.Errorf("%s tests alert %s, which %s does not define", rulesTest, name, rulesFile)
		}
	}
}

// checkRunbook returns why url does not point at a section of a file in
// this repository, or "".
func checkRunbook(url string) string {
	rest, ok := strings.CutPrefix(url, runbookBase)
	if !ok {
		return "runbook_url " + url + " is not under " + runbookBase
	}
	path, anchor, ok := strings.Cut(rest, "#")
	if !ok || anchor == "" {
		return "runbook_url " + url + " names no section"
	}
	b, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(path)))
	if err != nil {
		return "runbook_url " + url + ": " + err.Error()
	}
	if !headingAnchors(string(b))[anchor] {
		return "runbook_url " + url + ": " + path + " has no heading with anchor #" + anchor
	}
	return ""
}

var notInAnchor = regexp.MustCompile(`[^a-z0-9 _-]`)

// headingAnchors returns the anchors GitHub gives a Markdown file's
// headings: lower-cased, punctuation dropped, spaces made hyphens. Lines
// in fenced code blocks are not headings.
func headingAnchors(md string) map[string]bool {
	out := map[string]bool{}
	fenced := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		h = notInAnchor.ReplaceAllString(strings.ToLower(h), "")
		out[strings.ReplaceAll(h, " ", "-")] = true
	}
	return out
}

func TestHeadingAnchors(t *testing.T) {
	got := headingAnchors("# Top\n## A node its peers cannot hear (one-way partitions)\n```\n# not a heading\n```\n### `--max-clock-offset`: clocks\n")
	for _, want := range []string{"top", "a-node-its-peers-cannot-hear-one-way-partitions", "--max-clock-offset-clocks"} {
		if !got[want] {
			t.Errorf("no anchor %q in %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Errorf("a line in a code block became a heading")
	}
	if msg := checkRunbook(runbookBase + "docs/failures.md#no-such-section"); msg == "" {
		t.Errorf("a runbook link to a missing section passed")
	}
}
