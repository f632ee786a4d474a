package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/raftq/raftq/jepsen-lite/checker"
	"github.com/raftq/raftq/jepsen-lite/history"
)

type report struct {
	Seed      uint64         `json:"seed"`
	Workloads []string       `json:"workloads"`
	Nemesis   []string       `json:"nemesis"`
	Time      string         `json:"time"`
	Nodes     int            `json:"nodes"`
	Spares    int            `json:"spares,omitempty"`
	Shards    int            `json:"shards"`
	Dir       string         `json:"dir"`
	Ops       map[string]int `json:"ops"`
	Faults    map[string]int `json:"faults"`
	// Kinds is what each requested fault kind did (from the history).
	Kinds   []checker.FaultStats `json:"fault_kinds"`
	Results []checker.Result     `json:"results"`
	Final   *finalInfo           `json:"final,omitempty"`
	Valid   bool                 `json:"valid"`
}

func newReport(o *options, dir string, ops []history.Op, faults map[string]int, rs []checker.Result, fin *finalInfo) *report {
	r := &report{Seed: o.seed, Workloads: o.workloads, Nemesis: o.nemeses, Time: o.duration.String(), Nodes: o.nodes, Spares: o.spares, Shards: o.shards,
		Dir: dir, Ops: map[string]int{}, Faults: faults, Kinds: checker.Faults(ops), Results: rs, Final: fin, Valid: checker.Valid(rs)}
	for _, op := range ops {
		if op.Process >= 0 && op.Type != history.Invoke {
			r.Ops[op.F+":"+op.Type]++
		}
	}
	return r
}

func (r *report) write(dir string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), b, 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.txt"), []byte(r.text()), 0o644); err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	return nil
}

func sortedCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

func (r *report) text() string {
	var b strings.Builder
	spares := ""
	if r.Spares > 0 {
		spares = fmt.Sprintf(" (+%d spare)", r.Spares)
	}
	fmt.Fprintf(&b, "\n=== jepsen-lite seed %d  workloads %v  nemesis %v  time %s  nodes %d%s  shards %d\n", r.Seed, r.Workloads, r.Nemesis, r.Time, r.Nodes, spares, r.Shards)
	fmt.Fprintf(&b, "operations: %s\n", sortedCounts(r.Ops))
	fmt.Fprintf(&b, "faults:     %s\n", sortedCounts(r.Faults))
	b.WriteString(faultLines(r.Kinds))
	if f := r.Final; f != nil {
		fmt.Fprintf(&b, "final:      drained=%d dead=%d records=%d missing-records=%d replicas-converged=%v\n", f.Drained, f.Dead, f.Records, len(f.Missing), f.Converged)
		for _, rs := range f.Replicas {
			fmt.Fprintf(&b, "            shard %d leader %s applied %s digests-equal=%v\n", rs.Shard, rs.Leader, sortedCountsU(rs.Applied), sameDigest(rs.Digests, len(rs.Replicas)))
		}
		if f.Error != "" {
			fmt.Fprintf(&b, "final phase FAILED: %s\n", f.Error)
		}
	}
	for _, res := range r.Results {
		fmt.Fprintf(&b, "%s\n", res.Summary())
		for _, v := range res.Violations {
			fmt.Fprintf(&b, "    %s\n", v)
		}
		for i, n := range res.Notes {
			if i == 3 {
				fmt.Fprintf(&b, "    note: ... %d more in report.json\n", len(res.Notes)-3)
				break
			}
			fmt.Fprintf(&b, "    note: %s\n", n)
		}
	}
	verdict := "VALID"
	if !r.Valid {
		verdict = "INVALID"
	}
	fmt.Fprintf(&b, "verdict: %s   (history and report in %s)\n", verdict, r.Dir)
	return b.String()
}

func sortedCountsU(m map[string]uint64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// checkOnly re-checks a saved history.
func checkOnly(o *options) int {
	ops, err := history.ReadFile(o.check)
	if err != nil {
		fmt.Fprintln(os.Stderr, "jepsen-lite:", err)
		return 2
	}
	fifo := map[string]bool{}
	for _, q := range strings.Split(o.fifo, ",") {
		if q != "" {
			fifo[q] = true
		}
	}
	rs := checker.Check(ops, checker.Options{FIFOQueues: fifo})
	fmt.Print(faultLines(checker.Faults(ops)))
	for _, r := range rs {
		fmt.Println(r.Summary())
		for _, v := range r.Violations {
			fmt.Println("   ", v)
		}
		for _, n := range r.Notes {
			fmt.Println("    note:", n)
		}
	}
	if !checker.Valid(rs) {
		return 1
	}
	return 0
}

// sameDigest reports whether all n replicas gave the same index and
// digest.
func sameDigest(ds map[string]string, n int) bool {
	if len(ds) < n {
		return false
	}
	first := ""
	for _, d := range ds {
		if first == "" {
			first = d
		} else if d != first {
			return false
		}
	}
	return first != ""
}

// faultLines is one line per fault kind: how many fired, how long they
// held, how many failed.
func faultLines(kinds []checker.FaultStats) string {
	var b strings.Builder
	for _, k := range kinds {
		fmt.Fprintf(&b, "  %-10s fired %d, held %v total, %v max", k.Kind, k.Fired, k.Held.Round(100*time.Millisecond), k.MaxHeld.Round(100*time.Millisecond))
		if k.Failed > 0 {
			fmt.Fprintf(&b, ", FAILED %d", k.Failed)
		}
		b.WriteString("\n")
	}
	return b.String()
}
