package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/raftq/raftq/cluster"
)

// Memory reports a node's live heap against its budget; *cluster.Node
// implements it.
type Memory interface {
	MemoryUse() cluster.MemoryUse
}

var (
	descMemBudget   = prometheus.NewDesc("raftq_memory_budget_bytes", "Memory the node may use (--memory-budget); 0: none.", nil, nil)
	descMemLive     = prometheus.NewDesc("raftq_memory_live_heap_bytes", "Live heap after the last garbage collection, as the memory guard last sampled it.", nil, nil)
	descMemRefusing = prometheus.NewDesc("raftq_memory_refusing_sends", "1 while the node refuses sends because its live heap is above 60 % of the budget.", nil, nil)
)

type memCollector struct{ m Memory }

func (c *memCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descMemBudget
	ch <- descMemLive
	ch <- descMemRefusing
}

func (c *memCollector) Collect(ch chan<- prometheus.Metric) {
	u := c.m.MemoryUse()
	ch <- prometheus.MustNewConstMetric(descMemBudget, prometheus.GaugeValue, float64(u.Budget))
	ch <- prometheus.MustNewConstMetric(descMemLive, prometheus.GaugeValue, float64(u.Live))
	ch <- prometheus.MustNewConstMetric(descMemRefusing, prometheus.GaugeValue, b2f(u.Refusing))
}
