// Package metrics exposes a node's Prometheus metrics: request latency by
// gRPC method and code, message counters by queue, and, read at scrape
// time, raft state per local shard and queue depth per led shard.
package metrics

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/raftq/raftq/internal/version"
	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/shard"
)

// Shards lists the shards hosted on this node; *cluster.Node implements it.
type Shards interface {
	LocalShards() []*shard.Shard
}

// Metrics holds one node's registry; there is no global registry, so tests
// can run several nodes in one process.
type Metrics struct {
	reg      *prometheus.Registry
	shards   Shards
	queues   queueLabels // bounds the queue label values (queues.go)
	latency  *prometheus.HistogramVec
	propose  *prometheus.HistogramVec
	messages *prometheus.CounterVec
	// transitions counts the moves of messages the led shards applied
	// (queues.go).
	transitions *prometheus.CounterVec
	// A receive's call time is mostly its long poll when consumers keep
	// up; these split it into the wait and the claim (a claim should take
	// milliseconds, so the buckets are fine below 25 ms).
	receiveWait  prometheus.Histogram
	receiveClaim prometheus.Histogram
	// receiveParked is the long polls waiting now: consumers idle at this
	// node for want of messages.
	receiveParked prometheus.Gauge
	// Client-port connections (conns.go).
	clientConns   prometheus.Gauge
	clientRefused *prometheus.CounterVec
}

// New registers the node's metrics.
func New(shards Shards, opts ...Option) *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		reg:    reg,
		shards: shards,
		queues: queueLabels{max: DefaultMaxQueueLabels},
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "raftq_request_duration_seconds",
			Help:    "gRPC request latency by method and status code.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 25},
		}, []string{"method", "code"}),
		propose: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "raftq_shard_propose_seconds",
			Help:    "Latency of proposals made by this node as shard leader: hand-off to raft until applied (quorum fsync included).",
			Buckets: []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"shard"}),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "raftq_messages_total",
			Help: "Messages by queue and event: sent, received, deduplicated and refused_full counted by the node that served the call; acked, nacked, snoozed, extended and dead_lettered (by the client) by the leader of the message's shard as they commit.",
		}, []string{"queue", "event"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "raftq_queue_transitions_total",
			Help: "Moves of messages by queue and reason (lease_expired, nacked, snoozed, dead_lettered, dead_lettered_by_client, redriven, expired, dead_expired), counted by the leader of the message's shard.",
		}, []string{"queue", "reason"}),
	}
	if mt, ok := shards.(interface{ Meta() *meta.Store }); ok {
		m.queues.src = mt.Meta()
	}
	for _, o := range opts {
		o(m)
	}
	m.receiveWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "raftq_receive_wait_seconds",
		Help:    "Receives that returned messages: how long each waited (long poll) before a message was ready to lease.",
		Buckets: []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 20},
	})
	m.receiveClaim = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "raftq_receive_claim_seconds",
		Help:    "Receives that returned messages: time from finding a message ready to holding the leases (the lease's raft round included).",
		Buckets: []float64{.0005, .001, .002, .003, .005, .0075, .01, .015, .025, .05, .1, .25, .5, 1, 2.5},
	})
	m.receiveParked = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "raftq_receive_parked",
		Help: "Receives of this node's clients parked in their long poll now: nothing was ready to lease, so they wait for a send.",
	})
	m.clientConns = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "raftq_client_connections",
		Help: "gRPC connections open on this node's client port, served or past --max-client-conns.",
	})
	m.clientRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "raftq_client_connections_refused_total",
		Help: "Client-port connections refused: at=limit opened past --max-client-conns (their calls are refused until one closes), at=ceiling closed on accept.",
	}, []string{"at"})
	for _, at := range []string{"limit", "ceiling"} {
		m.clientRefused.WithLabelValues(at) // at 0 from the start, for rate() and alerts
	}
	reg.MustRegister(m.latency, m.propose, &countersCollector{m: m}, m.receiveWait, m.receiveClaim, m.receiveParked, m.clientConns, m.clientRefused,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&shardCollector{shards: shards, queues: &m.queues})
	if c, ok := shards.(Clock); ok {
		reg.MustRegister(&clockCollector{c: c})
	}
	if in, ok := shards.(Integrity); ok {
		reg.MustRegister(integrityCollector{node: in})
	}
	if m, ok := shards.(Memory); ok {
		reg.MustRegister(&memCollector{m: m})
	}
	if d, ok := shards.(Disks); ok {
		reg.MustRegister(&diskCollector{d: d})
	}
	if d, ok := shards.(DiskSyncs); ok {
		reg.MustRegister(diskSyncCollector{d: d})
	}
	if r, ok := shards.(RaftConns); ok {
		reg.MustRegister(&raftConnCollector{r: r})
	}
	return m
}

// Count adds n events for a queue. Settle events (acked, nacked...) are
// not counted here: receipts name no queue, so the shard leader counts
// them as they commit (queues.go).
func (m *Metrics) Count(queue, event string, n int) {
	if m == nil || n == 0 {
		return
	}
	m.messages.WithLabelValues(m.queues.label(queue), event).Add(float64(n))
}

// ObservePropose records one leader proposal's latency.
func (m *Metrics) ObservePropose(shard uint32, d time.Duration) {
	m.propose.WithLabelValues(strconv.FormatUint(uint64(shard), 10)).Observe(d.Seconds())
}

// ObserveReceive records one receive that returned messages.
func (m *Metrics) ObserveReceive(waited, claim time.Duration) {
	if m == nil {
		return
	}
	m.receiveWait.Observe(waited.Seconds())
	m.receiveClaim.Observe(claim.Seconds())
}

// ReceiveParked moves the count of parked long polls by delta.
func (m *Metrics) ReceiveParked(delta int) {
	if m == nil {
		return
	}
	m.receiveParked.Add(float64(delta))
}

// UnaryInterceptor records latency of every unary call.
func (m *Metrics) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		m.latency.WithLabelValues(info.FullMethod, status.Code(err).String()).Observe(time.Since(start).Seconds())
		return resp, err
	}
}

// Handler serves /metrics.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// shardCollector reads raft and queue state at scrape time, so idle shards
// cost nothing between scrapes.
type shardCollector struct {
	shards Shards
	queues *queueLabels
}

var (
	descLeader   = prometheus.NewDesc("raftq_shard_is_leader", "1 if this node leads the shard.", []string{"shard"}, nil)
	descTerm     = prometheus.NewDesc("raftq_shard_term", "Current raft term of the shard.", []string{"shard"}, nil)
	descCommit   = prometheus.NewDesc("raftq_shard_commit_index", "Raft commit index.", []string{"shard"}, nil)
	descApplied  = prometheus.NewDesc("raftq_shard_applied_index", "Raft applied index.", []string{"shard"}, nil)
	descDepth    = prometheus.NewDesc("raftq_queue_messages", "Messages by state, on the shards this node leads (sum over nodes for the queue total).", []string{"queue", "shard", "state"}, nil)
	descOldest   = prometheus.NewDesc("raftq_queue_oldest_ready_age_seconds", "Age of the oldest ready message on a led shard.", []string{"queue", "shard"}, nil)
	descBlockedG = prometheus.NewDesc("raftq_queue_blocked_groups", "FIFO groups with a message in flight on a led shard.", []string{"queue", "shard"}, nil)
	// Group commit as the leader's proposer saw it: commands/rounds is
	// the mean batch per fsync, bytes/rounds the mean bytes per fsync.
	descRounds   = prometheus.NewDesc("raftq_shard_proposer_rounds_total", "Group commits (bursts of log entries handed to raft together) proposed as leader.", []string{"shard"}, nil)
	descEntries  = prometheus.NewDesc("raftq_shard_proposer_entries_total", "Raft log entries proposed as leader.", []string{"shard"}, nil)
	descCommands = prometheus.NewDesc("raftq_shard_proposer_commands_total", "Commands proposed as leader (inside the entries).", []string{"shard"}, nil)
	descBytes    = prometheus.NewDesc("raftq_shard_proposer_bytes_total", "Encoded command bytes proposed as leader.", []string{"shard"}, nil)
)

func (c *shardCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLeader, descTerm, descCommit, descApplied, descDepth, descOldest, descBlockedG, descRounds, descEntries, descCommands, descBytes} {
		ch <- d
	}
}

func (c *shardCollector) Collect(ch chan<- prometheus.Metric) {
	now := time.Now().UnixMilli()
	for _, sh := range c.shards.LocalShards() {
		info := sh.Info()
		id := strconv.FormatUint(uint64(sh.ID()), 10)
		leader := 0.0
		if sh.IsLeader() {
			leader = 1
		}
		ch <- prometheus.MustNewConstMetric(descLeader, prometheus.GaugeValue, leader, id)
		ch <- prometheus.MustNewConstMetric(descTerm, prometheus.GaugeValue, float64(info.Term), id)
		ch <- prometheus.MustNewConstMetric(descCommit, prometheus.GaugeValue, float64(info.CommitIndex), id)
		ch <- prometheus.MustNewConstMetric(descApplied, prometheus.GaugeValue, float64(info.AppliedIndex), id)
		ps := sh.ProposerStats()
		ch <- prometheus.MustNewConstMetric(descRounds, prometheus.CounterValue, float64(ps.Rounds), id)
		ch <- prometheus.MustNewConstMetric(descEntries, prometheus.CounterValue, float64(ps.Entries), id)
		ch <- prometheus.MustNewConstMetric(descCommands, prometheus.CounterValue, float64(ps.Commands), id)
		ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(ps.Bytes), id)
		if leader == 0 {
			continue
		}
		// Queues past the label cap are folded into one series per
		// shard: depths and blocked groups add up, the oldest age is the
		// largest.
		type agg struct {
			depth   map[string]uint64
			age     float64
			blocked uint64
		}
		byLabel := map[string]*agg{}
		f := sh.FSM()
		for q := range f.Queues() {
			st, ok := f.Stats(q)
			if !ok {
				continue
			}
			l := c.queues.label(q)
			a := byLabel[l]
			if a == nil {
				a = &agg{depth: map[string]uint64{}}
				byLabel[l] = a
			}
			for state, v := range map[string]uint64{"ready": st.Ready, "delayed": st.Delayed, "in_flight": st.InFlight, "dead": st.Dead} {
				a.depth[state] += v
			}
			if st.OldestReadyMs > 0 && now > st.OldestReadyMs {
				a.age = max(a.age, float64(now-st.OldestReadyMs)/1000)
			}
			a.blocked += st.BlockedGroups
		}
		for l, a := range byLabel {
			for state, v := range a.depth {
				ch <- prometheus.MustNewConstMetric(descDepth, prometheus.GaugeValue, float64(v), l, id, state)
			}
			ch <- prometheus.MustNewConstMetric(descOldest, prometheus.GaugeValue, a.age, l, id)
			ch <- prometheus.MustNewConstMetric(descBlockedG, prometheus.GaugeValue, float64(a.blocked), l, id)
		}
	}
}

// Registerer is the node's registry, for metrics that other packages of the
// node define (the raft internals, cmd/node/raftmetrics.go).
func (m *Metrics) Registerer() prometheus.Registerer { return m.reg }

// SetBuildInfo registers raftq_build_info, always 1, labelled with the
// build that runs.
func (m *Metrics) SetBuildInfo(in version.Info) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "raftq_build_info",
		Help:        "Always 1; the labels say which build of raftq-node runs: module version, VCS commit and Go version.",
		ConstLabels: prometheus.Labels{"version": in.Version, "commit": in.Commit, "go_version": in.GoVersion},
	})
	g.Set(1)
	m.reg.MustRegister(g)
}
