package monitoring

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/raftq/raftq/internal/testenv"
)

const dashboardFile = "../grafana/raftq-dashboard.json"

type dsRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type target struct {
	Expr       string `json:"expr"`
	RefID      string `json:"refId"`
	Datasource *dsRef `json:"datasource"`
}

type panel struct {
	ID         int      `json:"id"`
	Type       string   `json:"type"`
	Title      string   `json:"title"`
	Datasource *dsRef   `json:"datasource"`
	Targets    []target `json:"targets"`
	Panels     []panel  `json:"panels"` // a collapsed row's panels
	GridPos    struct {
		H, W, X, Y int
	} `json:"gridPos"`
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Definition string          `json:"definition"`
	Multi      bool            `json:"multi"`
	IncludeAll bool            `json:"includeAll"`
	Datasource *dsRef          `json:"datasource"`
}

type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// queryPanels flattens rows: every panel that queries Prometheus.
func queryPanels(d dashboard) []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			out = append(out, p)
		}
	}
	walk(d.Panels)
	return out
}

// labelValues matches a Grafana variable query label_values(metric, label)
// or label_values(metric{...}, label).
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

// dashboardExprs returns every PromQL expression of the dashboard, panels
// and variable queries, keyed by where it is.
func dashboardExprs(t *testing.T, d dashboard) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range queryPanels(d) {
		for _, tg := range p.Targets {
			out[fmt.Sprintf("panel %d %q target %s", p.ID, p.Title, tg.RefID)] = tg.Expr
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Fatalf("variable %s: query %q is not label_values(metric, label)", v.Name, v.Definition)
		}
		out["variable "+v.Name] = m[1]
	}
	return out
}

func TestDashboardStructure(t *testing.T) {
	d := readDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard needs a uid and a title (got %q, %q)", d.UID, d.Title)
	}
	vars := map[string]variable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	if v := vars["datasource"]; v.Type != "datasource" || string(v.Query) != `"prometheus"` {
		t.Errorf("no Prometheus datasource variable named datasource: %+v", v)
	}
	for _, name := range []string{"job", "queue"} {
		v, ok := vars[name]
		if !ok || v.Type != "query" || !v.Multi || !v.IncludeAll {
			t.Errorf("variable %s: want a multi-value query variable with All, got %+v", name, v)
		}
		if ok && (v.Datasource == nil || v.Datasource.UID != "${datasource}") {
			t.Errorf("variable %s does not query the datasource variable", name)
		}
	}
	ps := queryPanels(d)
	if len(ps) < 30 {
		t.Errorf("only %d panels", len(ps))
	}
	// Ids, rows' included, are unique: Grafana links and edits panels by id.
	seen := map[int]bool{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if seen[p.ID] {
				t.Errorf("panel id %d used twice", p.ID)
			}
			seen[p.ID] = true
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, p := range ps {
		where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		if p.Title == "" {
			t.Errorf("%s has no title", where)
		}
		if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("%s: gridPos %+v outside the 24-column grid", where, p.GridPos)
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("%s does not use the datasource variable", where)
		}
		if len(p.Targets) == 0 {
			t.Errorf("%s has no query", where)
		}
		for _, tg := range p.Targets {
			if tg.Datasource == nil || tg.Datasource.UID != "${datasource}" {
				t.Errorf("%s target %s does not use the datasource variable", where, tg.RefID)
			}
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("%s target %s has no expression", where, tg.RefID)
			}
			// Each series selector is limited to the chosen jobs, so two
			// clusters in one Prometheus do not mix.
			if strings.Contains(tg.Expr, "{") && !strings.Contains(tg.Expr, `job=~"$job"`) {
				t.Errorf("%s target %s ignores $job: %s", where, tg.RefID, tg.Expr)
			}
		}
	}
	for where, expr := range dashboardExprs(t, d) {
		names, err := metricNames(expr)
		if err != nil {
			t.Errorf("%s: %v: %s", where, err, expr)
		} else if len(names) == 0 {
			t.Errorf("%s names no metric: %s", where, expr)
		}
	}
}

// grafanaVars are the values the dashboard's variables get for parsing.
var grafanaVars = strings.NewReplacer(
	"$__rate_interval", "1m", "$__interval", "1m", "$__range", "1h",
	"$job", "raftq", "$queue", "jobs", "${datasource}", "prometheus",
)

// TestDashboardQueriesParse has promtool parse every dashboard expression,
// Grafana's variables filled in, as a recording rule.
func TestDashboardQueriesParse(t *testing.T) {
	testenv.RequireTools(t, "promtool")
	d := readDashboard(t)
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	var names []string // names[i]: where dashboard:expr_<i+1> comes from
	n := 0
	for where, expr := range dashboardExprs(t, d) {
		e := grafanaVars.Replace(expr)
		if strings.Contains(e, "$") {
			t.Errorf("%s uses a variable this test does not fill in: %s", where, expr)
			continue
		}
		js, _ := json.Marshal(e) // a JSON string is a YAML string
		n++
		names = append(names, where)
		fmt.Fprintf(&b, "      - record: dashboard:expr_%d\n        expr: %s\n", n, js)
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := promtool(t, ".", "check", "rules", path)
	if err != nil {
		for i, where := range names {
			t.Logf("dashboard:expr_%d is %s", i+1, where)
		}
		t.Fatalf("promtool check rules on the dashboard's expressions: %v\n%s", err, out)
	}
	if want := fmt.Sprintf("SUCCESS: %d rules found", n); !strings.Contains(out, want) {
		t.Fatalf("promtool output lacks %q:\n%s", want, out)
	}
}
