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
// raftq_raft_internal_*, raft said once.
func TestRaftMetricsReachTheRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := installRaftMetrics(reg); err != nil {
		t.Fatal(err)
	}
	gometrics.MeasureSince([]string{"raft", "commitTime"}, time.Now().Add(-3*time.Millisecond))
	gometrics.MeasureSinceWithLabels([]string{"raft", "replication", "appendEntries", "rpc"}, time.Now(), []gometrics.Label{{Name: "peer_id", Value: "n2"}})
	n, err := testutil.GatherAndCount(reg, "raftq_raft_internal_commitTime", "raftq_raft_internal_replication_appendEntries_rpc")
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		mfs, _ := reg.Gather()
		var names []string
		for _, mf := range mfs {
			names = append(names, mf.GetName())
		}
		t.Fatalf("%d of the 2 raft timings gathered; registry has %s", n, strings.Join(names, ", "))
	}
}
