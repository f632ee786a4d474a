package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/raftq/raftq/cluster"
	"github.com/raftq/raftq/raftgroup"
)

// Disks reports a node's disk space and its raft groups' store writes;
// *cluster.Node implements it. New registers these metrics when the node
// it is given does.
type Disks interface {
	DiskSpace() cluster.DiskSpace
	RaftDiskStats() []raftgroup.DiskStats
}

var (
	descDiskFree     = prometheus.NewDesc("raftq_disk_free_bytes", "Free space of the data directory's filesystem that the node may use.", []string{"dir"}, nil)
	descDiskTotal    = prometheus.NewDesc("raftq_disk_total_bytes", "Size of the data directory's filesystem.", []string{"dir"}, nil)
	descDiskReserve  = prometheus.NewDesc("raftq_disk_reserve_bytes", "Free space below which the node refuses sends (--disk-reserve).", []string{"dir"}, nil)
	descDiskRefusing = prometheus.NewDesc("raftq_disk_refusing_sends", "1 while the node refuses sends because its disk is below the reserve.", []string{"dir"}, nil)
	descStalled      = prometheus.NewDesc("raftq_raft_store_stalled", "1 while a raft log or stable-store write of the group has been in flight longer than --disk-stall-timeout (the replica holds back its raft traffic).", []string{"group"}, nil)
	descStalls       = prometheus.NewDesc("raftq_raft_store_stalls_total", "Stall episodes of the group's raft store writes.", []string{"group"}, nil)
	descFull         = prometheus.NewDesc("raftq_raft_store_full", "1 while the group's raft store is out of space (a write was refused and the directory has not had room for a new segment since).", []string{"group"}, nil)
	descFulls        = prometheus.NewDesc("raftq_raft_store_full_total", "Episodes of the group's raft store writes refused for lack of space.", []string{"group"}, nil)
	descAppend       = prometheus.NewDesc("raftq_raft_append_seconds", "Time of the group's raft log appends (write and fsync of one batch).", []string{"group"}, nil)
)

type diskCollector struct{ d Disks }

func (c *diskCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descDiskFree, descDiskTotal, descDiskReserve, descDiskRefusing, descStalled, descStalls, descFull, descFulls, descAppend} {
		ch <- d
	}
}

func (c *diskCollector) Collect(ch chan<- prometheus.Metric) {
	if sp := c.d.DiskSpace(); sp.Known {
		ch <- prometheus.MustNewConstMetric(descDiskFree, prometheus.GaugeValue, float64(sp.Free), sp.Dir)
		ch <- prometheus.MustNewConstMetric(descDiskTotal, prometheus.GaugeValue, float64(sp.Total), sp.Dir)
		ch <- prometheus.MustNewConstMetric(descDiskReserve, prometheus.GaugeValue, float64(sp.Reserve), sp.Dir)
		ch <- prometheus.MustNewConstMetric(descDiskRefusing, prometheus.GaugeValue, b2f(sp.Refusing), sp.Dir)
	}
	for _, st := range c.d.RaftDiskStats() {
		ch <- prometheus.MustNewConstMetric(descStalled, prometheus.GaugeValue, b2f(st.Stalled), st.Group)
		ch <- prometheus.MustNewConstMetric(descStalls, prometheus.CounterValue, float64(st.Stalls), st.Group)
		ch <- prometheus.MustNewConstMetric(descFull, prometheus.GaugeValue, b2f(st.Full), st.Group)
		ch <- prometheus.MustNewConstMetric(descFulls, prometheus.CounterValue, float64(st.FullEpisodes), st.Group)
		buckets := make(map[float64]uint64, len(raftgroup.AppendBuckets))
		var cum uint64
		for i, le := range raftgroup.AppendBuckets {
			cum += st.AppendHist[i]
			buckets[le] = cum
		}
		ch <- prometheus.MustNewConstHistogram(descAppend, st.AppendCount, st.AppendSeconds, buckets, st.Group)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
