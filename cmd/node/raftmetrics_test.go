package main

import (
	"strings"
	"testing"
	"time"

	gometrics "github.com/armon/go-metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// What raft reports to go-metrics reaches the node's registry under
// raftq_raft_internal_*, raft said once, and memberlist's under
// raftq_gossip_internal_*.
func TestRaftMetricsReachTheRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := installRaftMetrics(reg); err != nil {
		t.Fatal(err)
	}
	gometrics.MeasureSince([]string{"raft", "commitTime"}, time.Now().Add(-3*time.Millisecond))
	gometrics.MeasureSinceWithLabels([]string{"raft", "replication", "appendEntries", "rpc"}, time.Now(), []gometrics.Label{{Name: "peer_id", Value: "n2"}})
	gometrics.MeasureSince([]string{"memberlist", "probeNode"}, time.Now())
	n, err := testutil.GatherAndCount(reg, "raftq_raft_internal_commitTime", "raftq_raft_internal_replication_appendEntries_rpc", "raftq_gossip_internal_probeNode")
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		mfs, _ := reg.Gather()
		var names []string
		for _, mf := range mfs {
			names = append(names, mf.GetName())
		}
		t.Fatalf("%d of the 3 timings gathered; registry has %s", n, strings.Join(names, ", "))
	}
}

// BenchmarkRaftMetricsSample is the cost of one raft timing (raft emits
// about ten per commit on a leader) with the sink installed, against
// BenchmarkRaftMetricsSampleBlackhole: go-metrics' default, what
// --raft-metrics=false leaves.
func BenchmarkRaftMetricsSample(b *testing.B) {
	if err := installRaftMetrics(prometheus.NewRegistry()); err != nil {
		b.Fatal(err)
	}
	benchSample(b)
}

func BenchmarkRaftMetricsSampleBlackhole(b *testing.B) {
	cfg := gometrics.DefaultConfig(raftMetricsPrefix)
	cfg.EnableRuntimeMetrics = false
	if _, err := gometrics.NewGlobal(cfg, &gometrics.BlackholeSink{}); err != nil {
		b.Fatal(err)
	}
	benchSample(b)
}

func benchSample(b *testing.B) {
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			gometrics.MeasureSince([]string{"raft", "commitTime"}, start)
		}
	})
}
