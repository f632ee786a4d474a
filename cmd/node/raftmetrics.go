package main

import (
	"fmt"
	"time"

	gometrics "github.com/armon/go-metrics"
	gmprom "github.com/armon/go-metrics/prometheus"
	"github.com/prometheus/client_golang/prometheus"
)

// raftMetricsPrefix names hashicorp/raft's and its log stores' own
// timings on /metrics: raft's key raft.commitTime becomes
// raftq_raft_internal_commitTime (docs/metrics.md lists them).
const raftMetricsPrefix = "raftq_raft_internal"

// installRaftMetrics sends hashicorp/raft's and raft-boltdb's own timings
// (commit time, leader dispatch, bolt StoreLogs, AppendEntries RPCs, FSM
// apply, snapshots) to reg. They are how a slow commit splits into disk,
// network and apply (docs/benchmarks.md, "What bounds the ceiling").
//
// The libraries report only through go-metrics' package-level functions
// (hashicorp/raft imports github.com/hashicorp/go-metrics/compat, which
// without the hashicorpmetrics build tag is github.com/armon/go-metrics),
// so the sink has to be go-metrics' process-wide global. That global is
// the one piece of global state this forces; it is set here, in the
// binary's main package, and nowhere else. Timings are summed over all
// raft groups of the node: the names carry no group label.
func installRaftMetrics(reg prometheus.Registerer) error {
	// Expiration drops a series that raft stopped reporting (a role this
	// node no longer has) after five minutes, longer than any scrape
	// interval.
	sink, err := gmprom.NewPrometheusSinkFrom(gmprom.PrometheusOpts{
		Name: "raftq_raft_internal_sink", Registerer: reg, Expiration: 5 * time.Minute,
	})
	if err != nil {
		return fmt.Errorf("raft metrics sink: %w", err)
	}
	cfg := gometrics.DefaultConfig(raftMetricsPrefix)
	cfg.EnableHostname = false
	cfg.EnableRuntimeMetrics = false // /metrics has the Go runtime already
	cfg.EnableTypePrefix = false
	cfg.TimerGranularity = time.Millisecond
	if _, err := gometrics.NewGlobal(cfg, dropRaftKey{sink}); err != nil {
		return fmt.Errorf("raft metrics: %w", err)
	}
	return nil
}

// gossipMetricsPrefix names memberlist's own timings (gossip probes,
// push-pulls), which reach the same go-metrics global.
const gossipMetricsPrefix = "raftq_gossip_internal"

// dropRaftKey removes the "raft" every key of the raft libraries starts
// with, after the service prefix go-metrics adds (raftq_raft_internal_raft_
// would say raft twice), and files memberlist's keys under
// raftq_gossip_internal_: gossip is not raft.
type dropRaftKey struct{ s gometrics.MetricSink }

func trim(key []string) []string {
	if len(key) > 2 && key[0] == raftMetricsPrefix {
		switch key[1] {
		case "raft":
			return append([]string{key[0]}, key[2:]...)
		case "memberlist":
			return append([]string{gossipMetricsPrefix}, key[2:]...)
		}
	}
	return key
}

func (d dropRaftKey) SetGauge(key []string, val float32) { d.s.SetGauge(trim(key), val) }
func (d dropRaftKey) SetGaugeWithLabels(key []string, val float32, l []gometrics.Label) {
	d.s.SetGaugeWithLabels(trim(key), val, l)
}
func (d dropRaftKey) EmitKey(key []string, val float32)     { d.s.EmitKey(trim(key), val) }
func (d dropRaftKey) IncrCounter(key []string, val float32) { d.s.IncrCounter(trim(key), val) }
func (d dropRaftKey) IncrCounterWithLabels(key []string, val float32, l []gometrics.Label) {
	d.s.IncrCounterWithLabels(trim(key), val, l)
}
func (d dropRaftKey) AddSample(key []string, val float32) { d.s.AddSample(trim(key), val) }
func (d dropRaftKey) AddSampleWithLabels(key []string, val float32, l []gometrics.Label) {
	d.s.AddSampleWithLabels(trim(key), val, l)
}
