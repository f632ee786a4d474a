package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/raftq/raftq/raftmux"
)

// RaftConns counts a node's inbound raft connections; *cluster.Node
// implements it.
type RaftConns interface {
	RaftConns() raftmux.ConnStats
}

var (
	descRaftConns      = prometheus.NewDesc("raftq_raft_connections", "Inbound raft connections open on this node's raft port.", nil, nil)
	descRaftConnsMax   = prometheus.NewDesc("raftq_raft_connections_limit", "Cap on inbound raft connections (--max-raft-conns); 0: none.", nil, nil)
	descRaftRefused    = prometheus.NewDesc("raftq_raft_connections_refused_total", "Inbound raft connections closed on accept because the node held --max-raft-conns.", nil, nil)
	descRaftIdleClosed = prometheus.NewDesc("raftq_raft_connections_idle_closed_total", "Inbound raft connections closed after --raft-idle-timeout without a byte.", nil, nil)
)

type raftConnCollector struct{ r RaftConns }

func (c *raftConnCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descRaftConns
	ch <- descRaftConnsMax
	ch <- descRaftRefused
	ch <- descRaftIdleClosed
}

func (c *raftConnCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.r.RaftConns()
	ch <- prometheus.MustNewConstMetric(descRaftConns, prometheus.GaugeValue, float64(st.Open))
	ch <- prometheus.MustNewConstMetric(descRaftConnsMax, prometheus.GaugeValue, float64(st.Max))
	ch <- prometheus.MustNewConstMetric(descRaftRefused, prometheus.CounterValue, float64(st.Refused))
	ch <- prometheus.MustNewConstMetric(descRaftIdleClosed, prometheus.CounterValue, float64(st.IdleClosed))
}

// ClientConns moves the count of open client-port connections by delta.
func (m *Metrics) ClientConns(delta int) {
	if m == nil {
		return
	}
	m.clientConns.Add(float64(delta))
}

// ClientConnRefused counts a client-port connection refused at: "limit"
// (past --max-client-conns: its calls are refused) or "ceiling" (closed
// on accept).
func (m *Metrics) ClientConnRefused(at string) {
	if m == nil {
		return
	}
	m.clientRefused.WithLabelValues(at).Inc()
}
