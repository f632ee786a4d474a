package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime/debug"
	"text/tabwriter"
)

// result is what a workload reports: JSON fields for scripts and rows for
// the human table.
type result interface {
	rows() [][2]string
}

func printResult(w io.Writer, r result, asJSON bool) error {
	if asJSON {
		b, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("encode result: %w", err)
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, row := range r.rows() {
		fmt.Fprintf(tw, "%s\t%s\n", row[0], row[1])
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("print result: %w", err)
	}
	return nil
}

// revision is the VCS revision this binary was built from, for the report.
func revision() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if len(rev) > 7 {
		rev = rev[:7]
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

func f0(v float64) string { return fmt.Sprintf("%.0f", v) }
func u(v uint64) string   { return fmt.Sprintf("%d", v) }

func lat(s summary) string {
	if s.Count == 0 {
		return "-"
	}
	return fmt.Sprintf("p50 %.2f  p99 %.2f  p999 %.2f  max %.2f ms  (n=%d)", s.P50, s.P99, s.P999, s.Max, s.Count)
}
