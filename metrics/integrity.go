package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/raftq/raftq/cluster"
	"github.com/raftq/raftq/raftstore"
)

// Integrity is what a node reports about the health of its replicas'
// data; *cluster.Node implements it.
type Integrity interface {
	Damaged() map[string]*raftstore.DamageError
	DigestStats() cluster.DigestStats
	Verified() bool
}

var (
	damagedDesc = prometheus.NewDesc("raftq_replica_damaged",
		"1 for each replica of this node found damaged (it neither votes nor serves until `raftq cluster repair`), by raft group and reason.",
		[]string{"group", "reason"}, nil)
	verifiedDesc = prometheus.NewDesc("raftq_node_identity_verified",
		"1 once the node knows it is not a member that lost its state; 0 while it takes no part in raft (docs/operations.md).",
		nil, nil)
	comparisonsDesc = prometheus.NewDesc("raftq_replica_comparisons_total",
		"Replica state comparisons this node led as a shard leader, by result: matched, diverged (a replica was fenced), undecided (no quorum shared a digest), failed.",
		[]string{"result"}, nil)
)

type integrityCollector struct{ node Integrity }

func (c integrityCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- damagedDesc
	ch <- verifiedDesc
	ch <- comparisonsDesc
}

func (c integrityCollector) Collect(ch chan<- prometheus.Metric) {
	for group, d := range c.node.Damaged() {
		ch <- prometheus.MustNewConstMetric(damagedDesc, prometheus.GaugeValue, 1, group, d.Reason)
	}
	v := 0.0
	if c.node.Verified() {
		v = 1
	}
	ch <- prometheus.MustNewConstMetric(verifiedDesc, prometheus.GaugeValue, v)
	st := c.node.DigestStats()
	for result, n := range map[string]uint64{"matched": st.Matched, "diverged": st.Diverged, "undecided": st.Undecided, "failed": st.Failed} {
		ch <- prometheus.MustNewConstMetric(comparisonsDesc, prometheus.CounterValue, float64(n), result)
	}
}
