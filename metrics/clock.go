package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/raftq/raftq/clockskew"
)

// Clock is the node's clock check and leadership history; *cluster.Node
// implements it (docs/clock.md).
type Clock interface {
	ClockStatus() clockskew.Status
	LeaderElections() map[string]uint64
}

var (
	descClockSkewed  = prometheus.NewDesc("raftq_clock_skewed", "1 while this node's clock is beyond --max-clock-offset from the cluster's median clock: it refuses to lead any raft group.", nil, nil)
	descClockChecked = prometheus.NewDesc("raftq_clock_checked", "1 once this node has compared its clock with enough peers to judge it (until then it does not lead).", nil, nil)
	descClockOffset  = prometheus.NewDesc("raftq_clock_offset_seconds", "This node's clock minus the median clock of the live members (itself included): what --max-clock-offset bounds.", nil, nil)
	descClockBound   = prometheus.NewDesc("raftq_clock_max_offset_seconds", "The bound (--max-clock-offset).", nil, nil)
	descPeerOffset   = prometheus.NewDesc("raftq_clock_peer_offset_seconds", "A live peer's clock minus this node's, the median of its recent gossip probe samples.", []string{"peer"}, nil)
	descPeerUnc      = prometheus.NewDesc("raftq_clock_peer_offset_uncertainty_seconds", "Half the probe round trip: how far raftq_clock_peer_offset_seconds may be off.", []string{"peer"}, nil)
	descLeaderElect  = prometheus.NewDesc("raftq_raft_leader_elections_total", "Times this node became leader of a raft group (meta, shard-N) since it started.", []string{"group"}, nil)
)

type clockCollector struct{ c Clock }

func (c *clockCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descClockSkewed, descClockChecked, descClockOffset, descClockBound, descPeerOffset, descPeerUnc, descLeaderElect} {
		ch <- d
	}
}

func (c *clockCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.c.ClockStatus()
	ch <- prometheus.MustNewConstMetric(descClockSkewed, prometheus.GaugeValue, boolGauge(st.State == clockskew.Beyond))
	ch <- prometheus.MustNewConstMetric(descClockChecked, prometheus.GaugeValue, boolGauge(st.State != clockskew.Unchecked))
	ch <- prometheus.MustNewConstMetric(descClockOffset, prometheus.GaugeValue, st.Offset.Seconds())
	ch <- prometheus.MustNewConstMetric(descClockBound, prometheus.GaugeValue, st.Bound.Seconds())
	for peer, e := range st.Peers {
		ch <- prometheus.MustNewConstMetric(descPeerOffset, prometheus.GaugeValue, e.Offset.Seconds(), peer)
		ch <- prometheus.MustNewConstMetric(descPeerUnc, prometheus.GaugeValue, e.Uncertainty.Seconds(), peer)
	}
	for group, n := range c.c.LeaderElections() {
		ch <- prometheus.MustNewConstMetric(descLeaderElect, prometheus.CounterValue, float64(n), group)
	}
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
