package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/raftq/raftq/client"
)

// The topic workload (issue #35): publishers send to a topic with N
// subscriptions, each subscription drained by consumers of its own. Every
// publish is due once on every subscription, so the ledger books N copies
// of each and checks all of them; a publish whose SendResult.Deliveries is
// not N is counted too. With --hold M the consumers stay stopped while M
// messages are published, and node memory is read before and after: one
// shared body per message means memory per message grows with N by the
// per-copy bookkeeping only, far slower than N bodies.

// topicCell is one subscription count's run.
type topicCell struct {
	Subs  int    `json:"subscriptions"`
	Topic string `json:"topic"`

	// The throughput run (no --hold).
	WarmupS        float64 `json:"warmup_s,omitempty"`
	DurationS      float64 `json:"duration_s,omitempty"`
	PublishedPerS  float64 `json:"published_per_s"`
	DeliveriesPerS float64 `json:"deliveries_per_s"`
	// The slowest and fastest subscription's acked copies per second.
	MinSubPerS float64 `json:"min_subscription_per_s"`
	MaxSubPerS float64 `json:"max_subscription_per_s"`
	// BacklogAtEnd is the copies acked by the cluster but not yet acked by
	// a consumer when the window closed: consumers falling behind show
	// here, not in deliveries/s.
	BacklogAtEnd int64 `json:"backlog_at_end"`
	// BacklogWaits counts the producers' waits for the backlog to fall
	// under --max-backlog: the consumers set the pace.
	BacklogWaits uint64  `json:"backlog_waits"`
	PublishP50   float64 `json:"publish_p50_ms,omitempty"`
	PublishP99   float64 `json:"publish_p99_ms,omitempty"`
	E2EP50       float64 `json:"e2e_p50_ms,omitempty"`
	E2EP99       float64 `json:"e2e_p99_ms,omitempty"`
	Publish      summary `json:"publish"`
	E2E          summary `json:"e2e"`
	// CPU is per delivery (an acked copy); ServerUsPerPublish is the
	// nodes' CPU per published message.
	CPU                cpuUse  `json:"cpu"`
	ServerUsPerPublish float64 `json:"server_cpu_us_per_publish,omitempty"`

	// The --hold run.
	Held      int     `json:"held,omitempty"`
	SeedS     float64 `json:"seed_s,omitempty"`
	SeedPerS  float64 `json:"seed_per_s,omitempty"`
	DrainPerS float64 `json:"drain_deliveries_per_s,omitempty"`
	// Memory of each node before publishing, with the messages held, and
	// after the drain; per message is the growth over the held messages,
	// per node (every node holds a replica of every shard).
	MemBefore      *memReading `json:"memory_before,omitempty"`
	MemHeld        *memReading `json:"memory_held,omitempty"`
	MemDrained     *memReading `json:"memory_drained,omitempty"`
	HeapPerMsg     float64     `json:"heap_bytes_per_msg_per_node,omitempty"`
	RSSPerMsg      float64     `json:"rss_bytes_per_msg_per_node,omitempty"`
	HeapLeftPerMsg float64     `json:"heap_left_after_drain_per_msg,omitempty"`
	LiveHeap       bool        `json:"live_heap,omitempty"` // a GC was forced before each reading
	MemoryError    string      `json:"memory_error,omitempty"`

	ShortDeliveries uint64   `json:"short_deliveries"`
	Lost            uint64   `json:"lost"`
	Duplicates      uint64   `json:"duplicates"`
	Redelivered     uint64   `json:"redelivered"`
	Unknown         uint64   `json:"unknown_sends"`
	SendErrors      uint64   `json:"send_errors"`
	ReceiveErrors   uint64   `json:"receive_errors"`
	AckErrors       uint64   `json:"ack_errors"`
	LastError       string   `json:"last_error,omitempty"`
	DrainS          float64  `json:"drain_s"`
	Ledger          tally    `json:"ledger"`
	Missing         []string `json:"missing,omitempty"`
}

type topicResult struct {
	Workload  string    `json:"workload"`
	Revision  string    `json:"revision,omitempty"`
	Placement placement `json:"placement"`
	Addrs     []string  `json:"addrs"`
	Producers int       `json:"producers"`
	Inflight  int       `json:"inflight"`
	SendMode  string    `json:"send_mode"`
	// Consumers is per subscription.
	Consumers int     `json:"consumers_per_subscription"`
	Batch     int     `json:"batch"`
	AckMode   string  `json:"ack_mode"`
	Size      int     `json:"size"`
	Rate      float64 `json:"rate_limit,omitempty"`
	// MaxBacklog is --max-backlog of a throughput run (0: unbounded).
	MaxBacklog int64       `json:"max_backlog,omitempty"`
	Hold       int         `json:"hold,omitempty"`
	Cells      []topicCell `json:"cells"`
}

func (r *topicResult) rows() [][2]string {
	mode := "Send"
	if r.SendMode == "async" {
		mode = "SendAsync"
	}
	rows := [][2]string{
		{"workload", fmt.Sprintf("topic (revision %s)", r.Revision)},
		{"cluster", strings.Join(r.Addrs, ",")},
		{"leaders", r.Placement.row()},
		{"load", fmt.Sprintf("%d producers x %d in flight (%s), %d consumers per subscription x batch %d (%s acks), %d B bodies",
			r.Producers, r.Inflight, mode, r.Consumers, r.Batch, r.AckMode, r.Size)},
	}
	if r.Rate > 0 {
		rows = append(rows, [2]string{"rate cap", f0(r.Rate) + " publishes/s"})
	}
	if r.MaxBacklog > 0 {
		rows = append(rows, [2]string{"backlog cap", fmt.Sprintf("producers wait while more than %d copies wait for consumers", r.MaxBacklog)})
	}
	for _, c := range r.Cells {
		rows = append(rows, c.rows(r.Size)...)
	}
	return rows
}

func (c *topicCell) rows(size int) [][2]string {
	rows := [][2]string{{"", ""}, {"subscriptions", fmt.Sprintf("%d (topic %s)", c.Subs, c.Topic)}}
	if c.Held == 0 {
		rows = append(rows,
			[2]string{"window", fmt.Sprintf("%.0fs after %.0fs warmup", c.DurationS, c.WarmupS)},
			[2]string{"published/s", f0(c.PublishedPerS)},
			[2]string{"deliveries/s", fmt.Sprintf("%s  (acked copies, all subscriptions; per subscription %s-%s)", f0(c.DeliveriesPerS), f0(c.MinSubPerS), f0(c.MaxSubPerS))},
			[2]string{"backlog at end", fmt.Sprintf("%d copies (producers waited for it %d times)", c.BacklogAtEnd, c.BacklogWaits)},
			[2]string{"publish latency", lat(c.Publish)},
			[2]string{"end to end", lat(c.E2E)},
			[2]string{"cpu in window", c.CPU.row() + fmt.Sprintf("  (per delivery; %.1f µs of node CPU per publish)", c.ServerUsPerPublish)},
		)
	} else {
		heap := "heap"
		if c.LiveHeap {
			heap = "live heap"
		}
		rows = append(rows,
			[2]string{"held", fmt.Sprintf("%d publishes x %d subscriptions, seeded in %.1fs (%.0f/s)", c.Held, c.Subs, c.SeedS, c.SeedPerS)},
			[2]string{"node " + heap, memRow(c.MemBefore, c.MemHeld, c.MemDrained, func(m *memReading) []uint64 { return m.Heap })},
			[2]string{"node RSS", memRow(c.MemBefore, c.MemHeld, c.MemDrained, func(m *memReading) []uint64 { return m.RSS })},
			[2]string{"memory per message", fmt.Sprintf("%s %.0f B, RSS %.0f B per node (%.0f B per copy; %d bodies would be %d B)",
				heap, c.HeapPerMsg, c.RSSPerMsg, c.HeapPerMsg/float64(c.Subs), c.Subs, c.Subs*size)},
			[2]string{"left after drain", fmt.Sprintf("%s %.0f B per message per node", heap, c.HeapLeftPerMsg)},
			[2]string{"drain", fmt.Sprintf("%.1fs, %.0f deliveries/s", c.DrainS, c.DrainPerS)},
		)
		if c.MemoryError != "" {
			rows = append(rows, [2]string{"memory error", c.MemoryError})
		}
	}
	rows = append(rows,
		[2]string{"short deliveries", u(c.ShortDeliveries) + "  (publishes that reached fewer subscriptions)"},
		[2]string{"lost", u(c.Lost) + "  (copies)"},
		[2]string{"duplicates / redelivered", fmt.Sprintf("%d / %d", c.Duplicates, c.Redelivered)},
		[2]string{"unknown sends", u(c.Unknown)},
		[2]string{"errors", fmt.Sprintf("send %d, receive %d, ack %d", c.SendErrors, c.ReceiveErrors, c.AckErrors)},
	)
	if c.Held == 0 {
		rows = append(rows, [2]string{"drain", fmt.Sprintf("%.1fs", c.DrainS)})
	}
	if c.LastError != "" {
		rows = append(rows, [2]string{"last error", c.LastError})
	}
	if len(c.Missing) > 0 {
		rows = append(rows, [2]string{"missing", strings.Join(c.Missing, " ")})
	}
	return rows
}

// memRow formats one figure of each node before / held / drained.
func memRow(before, held, drained *memReading, f func(*memReading) []uint64) string {
	var parts []string
	for _, m := range []*memReading{before, held, drained} {
		if m == nil {
			parts = append(parts, "-")
			continue
		}
		var s []string
		for _, v := range f(m) {
			s = append(s, mib(v))
		}
		parts = append(parts, strings.Join(s, ", "))
	}
	return fmt.Sprintf("before %s; held %s; drained %s", parts[0], parts[1], parts[2])
}

func runTopic(ctx context.Context, cfg config, stderr io.Writer) (result, error) {
	nodes, err := newNodeSource(cfg.Pids, cfg.Metrics)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	c, where, err := dial(ctx, cfg, stderr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	r := &topicResult{Workload: "topic", Revision: revision(), Placement: where, Addrs: cfg.Addrs,
		Producers: cfg.Producers, Inflight: cfg.Inflight, SendMode: cfg.SendMode, Consumers: cfg.Consumers,
		Batch: cfg.Batch, AckMode: cfg.AckMode, Size: cfg.Size, Rate: cfg.Rate, Hold: cfg.Hold}
	if cfg.Hold == 0 {
		r.MaxBacklog = cfg.MaxBacklog
	}
	var failed []error
	for _, n := range cfg.Subs {
		cell, err := topicOnce(ctx, c, cfg, stderr, nodes, n)
		if cell != nil {
			r.Cells = append(r.Cells, *cell)
		}
		if err != nil {
			if cell == nil || ctx.Err() != nil {
				return r, err
			}
			// A check that failed is reported with the cell; the other
			// counts still run.
			failed = append(failed, err)
		}
	}
	if len(failed) > 0 {
		return r, fmt.Errorf("topic: %w", joinErrs(failed))
	}
	return r, nil
}

// joinErrs joins errors into one line per cell, keeping errFailed
// matchable.
func joinErrs(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	var s []string
	for _, e := range errs {
		s = append(s, e.Error())
	}
	return fmt.Errorf("%w: %s", errFailed, strings.Join(s, "; "))
}

// createTopic makes a run's topic and its subs subscriptions, named
// TOPIC-s1 ... TOPIC-sN; cleanup deletes them, subscriptions first (a
// topic with subscriptions cannot be deleted).
func createTopic(ctx context.Context, c *client.Client, cfg config, subs int) (topic string, names []string, cleanup func(), err error) {
	topic = queueName(cfg, "topic")
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cleanup = func() {
		for _, s := range names {
			deleteQueue(c, s)
		}
		deleteQueue(c, topic)
	}
	if _, err := c.CreateTopic(cctx, topic, client.TopicOptions{DedupWindow: cfg.DedupWindow}); err != nil {
		return "", nil, nil, fmt.Errorf("create bench topic: %w", err)
	}
	for i := range subs {
		name := fmt.Sprintf("%s-s%d", topic, i+1)
		if _, err := c.Subscribe(cctx, topic, name, client.SubscriptionOptions{}); err != nil {
			cleanup()
			return "", nil, nil, fmt.Errorf("create bench subscription: %w", err)
		}
		names = append(names, name)
	}
	return topic, names, cleanup, nil
}

// topicOnce runs one cell: a topic with subs subscriptions, the
// throughput run or the --hold run, the drain and the ledger check.
func topicOnce(ctx context.Context, c *client.Client, cfg config, stderr io.Writer, nodes nodeSource, subs int) (*topicCell, error) {
	topic, names, cleanup, err := createTopic(ctx, c, cfg, subs)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	spec := loadSpec{
		producers: cfg.Producers, inflight: cfg.Inflight, sendBatch: 1, asyncSend: cfg.SendMode == "async",
		consumers: cfg.Consumers, batch: cfg.Batch, asyncAck: cfg.AckMode == "async", size: cfg.Size, seed: cfg.Seed,
		rate: cfg.Rate, total: cfg.Hold, recvQueues: names,
	}
	if cfg.Hold == 0 {
		// A hold run's consumers are stopped while it publishes: a cap
		// would stop it.
		spec.maxBacklog = cfg.MaxBacklog
	}
	l := newLoad(c, topic, spec)
	var rl rateLine
	var phase atomic.Value // read by the progress goroutine
	phase.Store(fmt.Sprintf("topic %d subs", subs))
	prog := startProgress(ctx, stderr, cfg.Quiet, cfg.ProgressEvery, func(e time.Duration) string {
		return rl.formatFan(phase.Load().(string), e, l.enqueued.Load(), l.processed.Load(), subs)
	})
	defer prog.done()
	cell := &topicCell{Subs: subs, Topic: topic}
	var drainErr error
	if cfg.Hold > 0 {
		drainErr = topicHold(ctx, cfg, l, cell, &phase, nodes)
	} else {
		drainErr = topicSteady(ctx, cfg, l, cell, nodes)
	}
	prog.done()

	t := l.led.tally()
	cell.Ledger = t
	cell.ShortDeliveries = l.shortDeliveries.Load()
	cell.Lost, cell.Duplicates, cell.Unknown, cell.Redelivered = t.Lost, t.Duplicates, t.Unknown, l.redelivered.Load()
	cell.SendErrors, cell.ReceiveErrors, cell.AckErrors = l.sendErrs.Load(), l.recvErrs.Load(), l.ackErrs.Load()
	cell.LastError = lastError(l)
	if ctx.Err() != nil {
		return cell, fmt.Errorf("topic: interrupted: %w", ctx.Err())
	}
	if t.Lost > 0 {
		cell.Missing = l.led.missing(10)
		return cell, fmt.Errorf("%w: %d subscriptions: %d copies of acknowledged publishes never delivered (%v)", errFailed, subs, t.Lost, drainErr)
	}
	if t.Foreign > 0 {
		return cell, fmt.Errorf("%w: %d subscriptions: %d deliveries of messages never published", errFailed, subs, t.Foreign)
	}
	if cell.ShortDeliveries > 0 {
		return cell, fmt.Errorf("%w: %d subscriptions: %d acknowledged publishes reported fewer deliveries", errFailed, subs, cell.ShortDeliveries)
	}
	return cell, nil
}

// topicSteady is the throughput run: warmup, measured window, stop
// producers, drain.
func topicSteady(ctx context.Context, cfg config, l *load, cell *topicCell, nodes nodeSource) error {
	cctx, stopConsumers := context.WithCancel(ctx)
	defer stopConsumers()
	l.startConsumers(cctx)
	l.startProducers(ctx)

	sleep(ctx, cfg.Warmup)
	l.measuring.Store(true)
	a, subsA, cpuA := l.snapshot(), l.copySnapshot(), nodes.cpu(ctx)
	sleep(ctx, cfg.Duration)
	b, subsB, cpuB := l.snapshot(), l.copySnapshot(), nodes.cpu(ctx)
	l.measuring.Store(false)
	l.stopProducers()
	drainTook, drainErr := l.drain(ctx, cfg.DrainLimit)
	stopConsumers()
	l.consWG.Wait()

	d := b.at.Sub(a.at).Seconds()
	cell.WarmupS, cell.DurationS = cfg.Warmup.Seconds(), d
	cell.PublishedPerS = rate(a, b, func(c counters) uint64 { return c.enqueued })
	cell.DeliveriesPerS = rate(a, b, func(c counters) uint64 { return c.processed })
	cell.MinSubPerS, cell.MaxSubPerS = spread(subsA, subsB, d)
	cell.BacklogAtEnd = int64(b.enqueued)*int64(cell.Subs) - int64(b.processed)
	cell.BacklogWaits = l.backlogWaits.Load()
	cell.Publish, cell.E2E = l.enqueue.summary(), l.e2e.summary()
	cell.PublishP50, cell.PublishP99 = cell.Publish.P50, cell.Publish.P99
	cell.E2EP50, cell.E2EP99 = cell.E2E.P50, cell.E2E.P99
	cell.CPU = cpuA.use(cpuB, b.processed-a.processed)
	if pub := b.enqueued - a.enqueued; pub > 0 && cell.CPU.ServerS > 0 {
		cell.ServerUsPerPublish = cell.CPU.ServerS / float64(pub) * 1e6
	}
	cell.DrainS = drainTook.Seconds()
	return drainErr
}

// topicHold publishes cfg.Hold messages with every consumer stopped, reads
// node memory, drains and reads it again.
func topicHold(ctx context.Context, cfg config, l *load, cell *topicCell, phase *atomic.Value, nodes nodeSource) error {
	probe := memProbe{rss: nodes, metrics: splitList(cfg.Metrics), pprof: splitList(cfg.Pprof)}
	cell.Held, cell.LiveHeap = cfg.Hold, len(probe.pprof) > 0
	noteMem := func(m memReading, err error) *memReading {
		if err != nil && cell.MemoryError == "" {
			cell.MemoryError = err.Error()
		}
		return &m
	}
	cell.MemBefore = noteMem(probe.read(ctx))

	phase.Store(fmt.Sprintf("hold %d subs: publish", cell.Subs))
	start := time.Now()
	l.startProducers(ctx)
	l.prodWG.Wait()
	cell.SeedS = time.Since(start).Seconds()
	cell.SeedPerS = float64(l.enqueued.Load()) / cell.SeedS
	if ctx.Err() != nil {
		return fmt.Errorf("hold: interrupted while publishing: %w", ctx.Err())
	}
	// Let the followers apply everything before reading their memory.
	sleep(ctx, 3*time.Second)
	cell.MemHeld = noteMem(probe.read(ctx))

	phase.Store(fmt.Sprintf("hold %d subs: drain", cell.Subs))
	cctx, stopConsumers := context.WithCancel(ctx)
	defer stopConsumers()
	start = time.Now()
	l.startConsumers(cctx)
	drainTook, drainErr := l.drain(ctx, cfg.DrainLimit)
	stopConsumers()
	l.consWG.Wait()
	cell.DrainS = drainTook.Seconds()
	cell.DrainPerS = float64(l.processed.Load()) / time.Since(start).Seconds()
	sleep(ctx, 3*time.Second)
	cell.MemDrained = noteMem(probe.read(ctx))

	held := int(l.enqueued.Load())
	heap := func(m *memReading) []uint64 { return m.Heap }
	rss := func(m *memReading) []uint64 { return m.RSS }
	cell.HeapPerMsg = perMessage(cell.MemBefore, cell.MemHeld, heap, held)
	cell.RSSPerMsg = perMessage(cell.MemBefore, cell.MemHeld, rss, held)
	cell.HeapLeftPerMsg = perMessage(cell.MemBefore, cell.MemDrained, heap, held)
	return drainErr
}

// perMessage is the mean growth per node of f from a to b, over n
// messages (0 when a reading is missing).
func perMessage(a, b *memReading, f func(*memReading) []uint64, n int) float64 {
	if a == nil || b == nil || n == 0 {
		return 0
	}
	va, vb := f(a), f(b)
	k := min(len(va), len(vb))
	if k == 0 {
		return 0
	}
	var grow float64
	for i := range k {
		grow += float64(vb[i]) - float64(va[i])
	}
	return grow / float64(k) / float64(n)
}

// copySnapshot is each subscription's acked copies so far.
func (l *load) copySnapshot() []uint64 {
	out := make([]uint64, len(l.copyProcessed))
	for i := range l.copyProcessed {
		out[i] = l.copyProcessed[i].Load()
	}
	return out
}

// spread is the slowest and fastest per-second rate between two
// per-subscription snapshots d seconds apart.
func spread(a, b []uint64, d float64) (lo, hi float64) {
	if d <= 0 || len(a) == 0 || len(a) != len(b) {
		return 0, 0
	}
	for i := range a {
		r := float64(b[i]-a[i]) / d
		if i == 0 || r < lo {
			lo = r
		}
		if i == 0 || r > hi {
			hi = r
		}
	}
	return lo, hi
}
