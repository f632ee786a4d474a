package monitoring

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// promqlKeywords are the words of PromQL that are not metric names:
// operators, modifiers and the aggregations (which may be followed by
// by/without before their parenthesis, so the "(" rule misses them);
// lower-cased, as PromQL reads them case-insensitively.
var promqlKeywords = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true,
	"stdvar": true, "count": true, "count_values": true, "bottomk": true, "topk": true,
	"quantile": true, "limitk": true, "limit_ratio": true,
	"and": true, "or": true, "unless": true, "atan2": true,
	"by": true, "without": true, "on": true, "ignoring": true,
	"group_left": true, "group_right": true, "bool": true, "offset": true,
	"inf": true, "nan": true,
}

// labelListKeywords are followed by a parenthesised list of label names.
var labelListKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true,
	"group_left": true, "group_right": true,
}

// metricNames returns the metric names an expression selects. It is a
// small PromQL lexer rather than the real parser (whose module would pull
// half of Prometheus into go.mod): it skips strings, numbers and
// durations, label matchers inside braces, ranges in brackets, label lists
// after by/without/on/ignoring/group_left/group_right, function names (an
// identifier followed by "("), keywords and Grafana variables ($name,
// ${name}). Whatever identifier is left is a metric name. Whether the
// expression parses at all is promtool's job (TestDashboardQueriesParse).
func metricNames(expr string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	i := 0
	braces, brackets := 0, 0
	labelList := false // the next "(" opens a label list
	listDepth := 0     // >0 while inside a label list
	for i < len(expr) {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(expr) && expr[j] != c {
				if expr[j] == '\\' && c != '`' {
					j++
				}
				j++
			}
			if j >= len(expr) {
				return nil, fmt.Errorf("unterminated string at offset %d", i)
			}
			i = j + 1
		case c == '$':
			// Grafana variable: $name or ${name}.
			j := i + 1
			if j < len(expr) && expr[j] == '{' {
				k := strings.IndexByte(expr[j:], '}')
				if k < 0 {
					return nil, fmt.Errorf("unterminated ${ at offset %d", i)
				}
				i = j + k + 1
				continue
			}
			for j < len(expr) && isIdentChar(expr[j]) {
				j++
			}
			i = j
		case c == '{':
			braces++
			i++
		case c == '}':
			braces--
			if braces < 0 {
				return nil, fmt.Errorf("unbalanced } at offset %d", i)
			}
			i++
		case c == '[':
			brackets++
			i++
		case c == ']':
			brackets--
			if brackets < 0 {
				return nil, fmt.Errorf("unbalanced ] at offset %d", i)
			}
			i++
		case c == '(':
			if listDepth > 0 || labelList {
				listDepth++
				labelList = false
			}
			i++
		case c == ')':
			if listDepth > 0 {
				listDepth--
			}
			i++
		case c >= '0' && c <= '9' || c == '.':
			// Numbers (1e9, 0x1f, .5) and durations (5m, 1h30m).
			j := i + 1
			for j < len(expr) && (isIdentChar(expr[j]) || expr[j] == '.') {
				j++
			}
			i = j
		case isIdentStart(c):
			j := i + 1
			for j < len(expr) && isIdentChar(expr[j]) {
				j++
			}
			word := expr[i:j]
			i = j
			if braces > 0 || brackets > 0 || listDepth > 0 {
				continue // a label name, or inside a range
			}
			lw := strings.ToLower(word)
			if labelListKeywords[lw] {
				labelList = true
				continue
			}
			if promqlKeywords[lw] {
				continue
			}
			k := i
			for k < len(expr) && (expr[k] == ' ' || expr[k] == '\t' || expr[k] == '\n') {
				k++
			}
			if k < len(expr) && expr[k] == '(' {
				continue // a function or aggregation
			}
			if !seen[word] {
				seen[word] = true
				out = append(out, word)
			}
		default:
			i++ // operators, commas, @
		}
	}
	if braces != 0 || brackets != 0 || listDepth != 0 {
		return nil, fmt.Errorf("unbalanced braces, brackets or label list")
	}
	sort.Strings(out)
	return out, nil
}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isIdentChar(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }

func TestMetricNamesLexer(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`up{job="raftq"} == 0`, []string{"up"}},
		{`max by (shard) (raftq_shard_is_leader) < 1`, []string{"raftq_shard_is_leader"}},
		{`max by (shard) (raftq_shard_commit_index) - on (shard) group_right raftq_shard_applied_index > 1000`,
			[]string{"raftq_shard_applied_index", "raftq_shard_commit_index"}},
		{`histogram_quantile(0.99, sum by (shard, le) (rate(raftq_shard_propose_seconds_bucket{job=~"$job"}[$__rate_interval])))`,
			[]string{"raftq_shard_propose_seconds_bucket"}},
		{`sum by (queue) (raftq_queue_messages{state="dead"}) - sum by (queue) (raftq_queue_messages{state="dead"} offset 15m) > 0`,
			[]string{"raftq_queue_messages"}},
		{`predict_linear(raftq_disk_free_bytes[6h], 24 * 3600) < raftq_disk_reserve_bytes`,
			[]string{"raftq_disk_free_bytes", "raftq_disk_reserve_bytes"}},
		{`raftq_memory_live_heap_bytes / (raftq_memory_budget_bytes > 0) > 0.5`,
			[]string{"raftq_memory_budget_bytes", "raftq_memory_live_heap_bytes"}},
		{`count(max by (shard) (x{a="by (y)", b='}'}) < 1) or vector(0)`, []string{"x"}},
		{`a unless ignoring (instance) group_left (version, commit) b and bool c`, []string{"a", "b", "c"}},
		{"raftq_tls_cert_expiry_timestamp_seconds - time() < 14 * 86400 + Inf + 1e9 + 0x1f", []string{"raftq_tls_cert_expiry_timestamp_seconds"}},
		{`sum without (le) (rate(m[${__range}]))`, []string{"m"}},
	} {
		got, err := metricNames(tc.expr)
		if err != nil {
			t.Errorf("%s: %v", tc.expr, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.expr, got, tc.want)
		}
	}
	for _, bad := range []string{`x{a="b"`, `rate(x[5m)`, `x{a="b}`} {
		if _, err := metricNames(bad); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}
