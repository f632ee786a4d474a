package main

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"
)

type backlogResult struct {
	Workload  string    `json:"workload"`
	Revision  string    `json:"revision,omitempty"`
	Placement placement `json:"placement"`
	Messages  int       `json:"messages"`
	Size      int       `json:"size"`
	Producers int       `json:"producers"`
	SendBatch int       `json:"send_batch"`
	Consumers int       `json:"consumers"`
	Batch     int       `json:"batch"`
	SeedS     float64   `json:"seed_s"`
	SeedPerS  float64   `json:"seed_per_s"`
	DrainS    float64   `json:"drain_s"`
	DrainPerS float64   `json:"drain_per_s"`
	ClaimP50  float64   `json:"claim_p50_ms"`
	ClaimP99  float64   `json:"claim_p99_ms"`

	// Resident memory of each node: before seeding, with the backlog
	// queued, after the drain; bytes per queued message is the growth over
	// the messages, per node (each node holds a replica of every shard).
	RSSBefore   []uint64 `json:"rss_before"`
	RSSQueued   []uint64 `json:"rss_queued"`
	RSSDrained  []uint64 `json:"rss_drained"`
	BytesPerMsg float64  `json:"bytes_per_msg_per_node"`
	MemoryError string   `json:"memory_error,omitempty"`
	Lost        uint64   `json:"lost"`
	Duplicates  uint64   `json:"duplicates"`
	Redelivered uint64   `json:"redelivered"`
	Unknown     uint64   `json:"unknown_sends"`
	Errors      string   `json:"errors"`
	LastError   string   `json:"last_error,omitempty"`
	Claim       summary  `json:"claim"`
}

func (r *backlogResult) rows() [][2]string {
	rss := func(v []uint64) string {
		s := ""
		for i, x := range v {
			if i > 0 {
				s += ", "
			}
			s += mib(x)
		}
		return s
	}
	rows := [][2]string{
		{"workload", fmt.Sprintf("backlog (revision %s)", r.Revision)},
		{"leaders", r.Placement.row()},
		{"backlog", fmt.Sprintf("%d x %d B, seeded by %d producers with SendBatch of %d", r.Messages, r.Size, r.Producers, r.SendBatch)},
		{"seed", fmt.Sprintf("%.1fs, %.0f msgs/s", r.SeedS, r.SeedPerS)},
		{"drain", fmt.Sprintf("%.1fs, %.0f msgs/s (%d consumers x batch %d)", r.DrainS, r.DrainPerS, r.Consumers, r.Batch)},
		{"claim latency", lat(r.Claim)},
		{"node RSS before", rss(r.RSSBefore)},
		{"node RSS queued", rss(r.RSSQueued)},
		{"node RSS drained", rss(r.RSSDrained)},
		{"memory per message", fmt.Sprintf("%.0f B per node", r.BytesPerMsg)},
		{"lost", u(r.Lost)},
		{"duplicates / redelivered", fmt.Sprintf("%d / %d", r.Duplicates, r.Redelivered)},
		{"unknown sends", u(r.Unknown)},
		{"errors", r.Errors},
	}
	if r.MemoryError != "" {
		rows = append(rows, [2]string{"memory error", r.MemoryError})
	}
	if r.LastError != "" {
		rows = append(rows, [2]string{"last error", r.LastError})
	}
	return rows
}

func runBacklog(ctx context.Context, cfg config, stderr io.Writer) (result, error) {
	mem, err := newNodeSource(cfg.Pids, cfg.Metrics)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	c, where, err := dial(ctx, cfg, stderr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	queue := queueName(cfg, "backlog")
	if err := createQueue(ctx, c, queue, defaultQueue(cfg)); err != nil {
		return nil, err
	}
	defer deleteQueue(c, queue)
	r := &backlogResult{Workload: "backlog", Revision: revision(), Placement: where, Messages: cfg.Backlog, Size: cfg.Size,
		Producers: cfg.Producers, SendBatch: cfg.SendBatch, Consumers: cfg.Consumers, Batch: cfg.Batch}
	noteMem := func(v []uint64, err error) []uint64 {
		if err != nil && r.MemoryError == "" {
			r.MemoryError = err.Error()
		}
		return v
	}
	r.RSSBefore = noteMem(mem.read(ctx))

	l := newLoad(c, queue, loadSpec{
		producers: cfg.Producers, inflight: cfg.Inflight * cfg.SendBatch, sendBatch: cfg.SendBatch,
		consumers: cfg.Consumers, batch: cfg.Batch, asyncAck: cfg.AckMode == "async", size: cfg.Size, seed: cfg.Seed, total: cfg.Backlog,
	})
	var rl rateLine
	var phase atomic.Value // read by the progress goroutine
	phase.Store("seed")
	prog := startProgress(ctx, stderr, cfg.Quiet, cfg.ProgressEvery, func(e time.Duration) string {
		return rl.format(phase.Load().(string), e, l.enqueued.Load(), l.processed.Load())
	})
	defer prog.done()

	start := time.Now()
	l.startProducers(ctx)
	l.prodWG.Wait()
	r.SeedS = time.Since(start).Seconds()
	r.SeedPerS = float64(l.enqueued.Load()) / r.SeedS
	if ctx.Err() != nil {
		return r, fmt.Errorf("backlog: interrupted while seeding: %w", ctx.Err())
	}
	// Let the followers catch up and the Go heap settle before reading RSS.
	sleep(ctx, 3*time.Second)
	r.RSSQueued = noteMem(mem.read(ctx))

	phase.Store("drain")
	l.measuring.Store(true)
	cctx, stopConsumers := context.WithCancel(ctx)
	defer stopConsumers()
	start = time.Now()
	l.startConsumers(cctx)
	_, drainErr := l.drain(ctx, cfg.DrainLimit)
	r.DrainS = time.Since(start).Seconds()
	stopConsumers()
	l.consWG.Wait()
	prog.done()
	r.DrainPerS = float64(l.enqueued.Load()) / r.DrainS
	r.RSSDrained = noteMem(mem.read(ctx))
	if n := min(len(r.RSSBefore), len(r.RSSQueued)); n > 0 && cfg.Backlog > 0 {
		var grow float64
		for i := range n {
			grow += float64(r.RSSQueued[i]) - float64(r.RSSBefore[i])
		}
		r.BytesPerMsg = grow / float64(n) / float64(cfg.Backlog)
	}
	t := l.led.tally()
	r.Lost, r.Duplicates, r.Unknown, r.Redelivered = t.Lost, t.Duplicates, t.Unknown, l.redelivered.Load()
	r.Errors = fmt.Sprintf("send %d, receive %d, ack %d", l.sendErrs.Load(), l.recvErrs.Load(), l.ackErrs.Load())
	r.LastError = lastError(l)
	r.Claim = l.claim.summary()
	r.ClaimP50, r.ClaimP99 = r.Claim.P50, r.Claim.P99
	if ctx.Err() != nil {
		return r, fmt.Errorf("backlog: interrupted: %w", ctx.Err())
	}
	if t.Lost > 0 {
		return r, fmt.Errorf("%w: %d acknowledged sends never delivered (%v)", errFailed, t.Lost, drainErr)
	}
	return r, nil
}
