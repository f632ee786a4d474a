package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	gometrics "github.com/armon/go-metrics"
)

// raftMetrics keeps hashicorp/raft's and raft-boltdb's own timings (commit
// time, leader log dispatch, bolt StoreLogs, AppendEntries RPCs, FSM apply)
// in memory and serves the last minute of 10 s intervals as JSON. They are
// how a slow commit is split into disk, network and apply
// (docs/benchmarks.md, "What bounds the ceiling"). The libraries report
// only to go-metrics' single process-wide sink, so this installs that
// sink, which is why it is opt-in (--raft-metrics) rather than part of
// /metrics. Timings are aggregated over
// all raft groups of the node; names carry no group label.
func raftMetrics() (http.HandlerFunc, error) {
	sink := gometrics.NewInmemSink(10*time.Second, time.Minute)
	cfg := gometrics.DefaultConfig("raftq")
	cfg.EnableHostname = false
	cfg.EnableRuntimeMetrics = false // /metrics has the Go runtime already
	if _, err := gometrics.NewGlobal(cfg, sink); err != nil {
		return nil, fmt.Errorf("raft metrics sink: %w", err)
	}
	return func(w http.ResponseWriter, r *http.Request) {
		summary, err := sink.DisplayMetrics(w, r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(summary)
	}, nil
}
