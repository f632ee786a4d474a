package console

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"sort"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/raftq/raftq/client"
)

// queueSample is one look at a queue, cluster-wide: its depth by state
// and the counts of its moves (QueueStats), which each shard's leader
// keeps and may restart from 0 (api/raftqv1/raftq.proto QueueStatsResponse).
type queueSample struct {
	At                             time.Time
	Ready, Delayed, InFlight, Dead uint64
	// Counts of moves: sent, received (leases granted), acked, and
	// dead-lettered (automatically or by a consumer).
	Sent, Received, Acked, DeadLettered uint64
}

// latencySample is one interval of a shard's proposals led by this node:
// how many, their mean and an upper bound of their 99th percentile (the
// histogram bucket holding it).
type latencySample struct {
	At          time.Time
	baseline    bool // the first reading: cumulative counts, no interval
	Count       float64
	Mean, P99   float64 // seconds; NaN when Count is 0
	cumCount    float64
	cumSum      float64
	cumBuckets  []float64
	bucketEdges []float64
}

// ring is a fixed-size buffer of samples, oldest first.
type ring[T any] struct {
	buf  []T
	next int
	full bool
}

func newRing[T any](n int) *ring[T] { return &ring[T]{buf: make([]T, n)} }

func (r *ring[T]) add(v T) {
	r.buf[r.next] = v
	r.next = (r.next + 1) % len(r.buf)
	if r.next == 0 {
		r.full = true
	}
}

func (r *ring[T]) all() []T {
	if !r.full {
		return append([]T(nil), r.buf[:r.next]...)
	}
	return append(append([]T(nil), r.buf[r.next:]...), r.buf[:r.next]...)
}

func (r *ring[T]) last() (T, bool) {
	var zero T
	if !r.full && r.next == 0 {
		return zero, false
	}
	return r.buf[(r.next-1+len(r.buf))%len(r.buf)], true
}

// sampler holds the rings: one per sampled queue (at most maxQueues,
// sorted by name: the first maxQueues a sampling caller may see) and one
// per shard this node has led.
type sampler struct {
	mu        sync.Mutex
	maxQueues int
	size      int
	now       func() time.Time
	queues    map[string]*ring[queueSample]
	shards    map[string]*ring[latencySample]
	skipped   int // queues past maxQueues at the last round
}

func newSampler(maxQueues, size int, now func() time.Time) *sampler {
	return &sampler{maxQueues: maxQueues, size: size, now: now,
		queues: make(map[string]*ring[queueSample]), shards: make(map[string]*ring[latencySample])}
}

// sampleOnce takes one round of samples. The console has no credentials
// of its own: it samples with the client of the most recently active
// logged-in session (or anonymously where no login is needed), so it sees
// only what that caller may. A plot is shown to a caller only after the
// caller's own QueueStats call for the queue succeeded (queueAPI), so no
// caller sees another's queues through the rings.
func (c *Console) sampleOnce(ctx context.Context) {
	// Expired sessions end here too, not only when someone uses them,
	// so their clients' connections close.
	c.sessions.pruneExpired()
	fams := c.readMetrics()
	c.samples.addLatency(fams)
	cl := c.sessions.newest()
	if cl == nil && !c.o.RequireLogin {
		cl, _ = c.anonClient(ctx)
	}
	if cl == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, c.o.SampleEvery)
	defer cancel()
	qs, err := cl.ListQueues(ctx)
	if err != nil {
		c.o.Logger.Debug("console: sampling queues", "err", err)
		return
	}
	sort.Slice(qs, func(i, j int) bool { return qs[i].Name < qs[j].Name })
	c.samples.setSkipped(max(0, len(qs)-c.samples.maxQueues))
	if len(qs) > c.samples.maxQueues {
		qs = qs[:c.samples.maxQueues]
	}
	keep := make(map[string]bool, len(qs))
	for _, q := range qs {
		keep[q.Name] = true
		st, err := cl.Stats(ctx, q.Name)
		if err != nil {
			continue
		}
		c.samples.addQueue(st)
	}
	c.samples.retain(keep)
}

func (s *sampler) setSkipped(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.skipped = n
}

// retain drops the rings of queues no longer listed (deleted ones).
func (s *sampler) retain(keep map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name := range s.queues {
		if !keep[name] {
			delete(s.queues, name)
		}
	}
}

func (s *sampler) addQueue(st client.QueueStats) {
	mv := st.Moves
	smp := queueSample{At: s.now(), Ready: st.Ready, Delayed: st.Delayed, InFlight: st.InFlight, Dead: st.Dead,
		Sent: mv["sent"], Received: mv["received"], Acked: mv["acked"],
		DeadLettered: mv["dead_lettered"] + mv["dead_lettered_by_client"]}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.queues[st.Name]
	if r == nil {
		if len(s.queues) >= s.maxQueues {
			return
		}
		r = newRing[queueSample](s.size)
		s.queues[st.Name] = r
	}
	r.add(smp)
}

func (s *sampler) queue(name string) []queueSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.queues[name]; r != nil {
		return r.all()
	}
	return nil
}

// rates are per-second rates between a queue's last two samples; ok is
// false with fewer than two samples. A rate is NaN where its count went
// down in the interval: a shard's leader changed or restarted and counts
// from 0 again, so the interval has no rate.
type rates struct {
	Sent, Received, Acked, DeadLettered float64
	ok                                  bool
}

func (s *sampler) lastRates(name string) rates {
	ss := s.queue(name)
	if len(ss) < 2 {
		return rates{}
	}
	return rateBetween(ss[len(ss)-2], ss[len(ss)-1])
}

func rateBetween(a, b queueSample) rates {
	dt := b.At.Sub(a.At).Seconds()
	if dt <= 0 {
		return rates{}
	}
	d := func(x, y uint64) float64 {
		if y < x {
			return math.NaN() // a reset
		}
		return float64(y-x) / dt
	}
	return rates{Sent: d(a.Sent, b.Sent), Received: d(a.Received, b.Received), Acked: d(a.Acked, b.Acked),
		DeadLettered: d(a.DeadLettered, b.DeadLettered), ok: true}
}

// readMetrics reads this node's metrics in process; nil without them.
func (c *Console) readMetrics() map[string]*dto.MetricFamily {
	if c.o.Metrics == nil {
		return nil
	}
	rec := &bufferWriter{h: http.Header{}}
	req, err := http.NewRequest(http.MethodGet, "/metrics", nil)
	if err != nil {
		return nil
	}
	c.o.Metrics.ServeHTTP(rec, req)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(&rec.buf)
	if err != nil {
		c.o.Logger.Debug("console: reading this node's metrics", "err", err)
		return nil
	}
	return fams
}

// bufferWriter is the ResponseWriter readMetrics hands the handler.
type bufferWriter struct {
	h   http.Header
	buf bytes.Buffer
}

func (w *bufferWriter) Header() http.Header         { return w.h }
func (w *bufferWriter) Write(b []byte) (int, error) { return w.buf.Write(b) }
func (w *bufferWriter) WriteHeader(int)             {}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// addLatency turns raftq_shard_propose_seconds into one interval per
// shard: the difference from the previous reading.
func (s *sampler) addLatency(fams map[string]*dto.MetricFamily) {
	if fams == nil {
		return
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range fams["raftq_shard_propose_seconds"].GetMetric() {
		shard := label(m, "shard")
		h := m.GetHistogram()
		cur := latencySample{At: now, cumCount: float64(h.GetSampleCount()), cumSum: h.GetSampleSum(), Mean: math.NaN(), P99: math.NaN()}
		for _, b := range h.GetBucket() {
			cur.bucketEdges = append(cur.bucketEdges, b.GetUpperBound())
			cur.cumBuckets = append(cur.cumBuckets, float64(b.GetCumulativeCount()))
		}
		r := s.shards[shard]
		if r == nil {
			if len(s.shards) >= 4096 { // shard ids are bounded by the cluster; belt and braces
				continue
			}
			r = newRing[latencySample](s.size)
			s.shards[shard] = r
			cur.baseline = true // intervals start with the next reading
			r.add(cur)
			continue
		}
		prev, _ := r.last()
		if n := cur.cumCount - prev.cumCount; n > 0 && len(prev.cumBuckets) == len(cur.cumBuckets) {
			cur.Count = n
			cur.Mean = (cur.cumSum - prev.cumSum) / n
			for i := range cur.cumBuckets {
				if cur.cumBuckets[i]-prev.cumBuckets[i] >= 0.99*n {
					cur.P99 = cur.bucketEdges[i]
					break
				}
			}
		}
		r.add(cur)
	}
}

// latency is every shard's intervals, oldest first.
func (s *sampler) latency() map[string][]latencySample {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]latencySample, len(s.shards))
	for id, r := range s.shards {
		var all []latencySample
		for _, l := range r.all() {
			if !l.baseline {
				all = append(all, l)
			}
		}
		out[id] = all
	}
	return out
}

func fmtSeconds(s float64) string {
	if math.IsNaN(s) {
		return "-"
	}
	return fmt.Sprint(time.Duration(s * float64(time.Second)).Round(10 * time.Microsecond))
}
