package main

import (
	"context"
	"fmt"
	"github.com/raftq/raftq/client"
	"io"
	"time"
)

// sweepRow is one cell: total sends in flight x receive batch.
type sweepRow struct {
	Concurrency   int     `json:"concurrency"`
	Producers     int     `json:"producers"`
	Inflight      int     `json:"inflight"`
	Batch         int     `json:"batch"`
	EnqueuePerS   float64 `json:"enqueue_per_s"`
	ProcessedPerS float64 `json:"processed_per_s"`
	EnqueueP99    float64 `json:"enqueue_p99_ms"`
	ClaimP50      float64 `json:"claim_p50_ms"`
	ClaimP99      float64 `json:"claim_p99_ms"`
	ReadyClaimP99 float64 `json:"ready_claim_p99_ms"`
	E2EP99        float64 `json:"e2e_p99_ms"`
	Errors        uint64  `json:"errors"`
	ReceiveCalls  uint64  `json:"receive_calls"`
	ReceiveEmpty  uint64  `json:"receive_empty"`
}

type sweepResult struct {
	Workload  string     `json:"workload"`
	Revision  string     `json:"revision,omitempty"`
	Placement placement  `json:"placement"`
	Consumers int        `json:"consumers"`
	Size      int        `json:"size"`
	DurationS float64    `json:"duration_s"`
	Rows      []sweepRow `json:"rows"`
}

func (r *sweepResult) rows() [][2]string {
	out := [][2]string{
		{"workload", fmt.Sprintf("sweep (revision %s), %d consumers, %d B, %.0fs per cell", r.Revision, r.Consumers, r.Size, r.DurationS)},
		{"leaders", r.Placement.row()},
		{"in flight x batch", "enqueue/s  processed/s  enq p99  claim p50  claim p99  ready p99  e2e p99 (ms)  errors  empty receives"},
	}
	for _, w := range r.Rows {
		out = append(out, [2]string{
			fmt.Sprintf("%4d (%dx%d) x %d", w.Concurrency, w.Producers, w.Inflight, w.Batch),
			fmt.Sprintf("%9.0f  %11.0f  %7.1f  %9.2f  %9.2f  %9.2f  %12.1f  %6d  %d/%d", w.EnqueuePerS, w.ProcessedPerS, w.EnqueueP99, w.ClaimP50, w.ClaimP99, w.ReadyClaimP99, w.E2EP99, w.Errors, w.ReceiveEmpty, w.ReceiveCalls),
		})
	}
	return out
}

// runSweep runs a short steady cell per (concurrency, batch). Cells do not
// drain: with batch 1 the consumers fall far behind and draining would
// dominate the run; the queue is deleted instead, and loss is checked by
// the steady workload.
func runSweep(ctx context.Context, cfg config, stderr io.Writer) (result, error) {
	c, where, err := dial(ctx, cfg, stderr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	res := &sweepResult{Workload: "sweep", Revision: revision(), Placement: where, Consumers: cfg.Consumers, Size: cfg.Size, DurationS: cfg.Duration.Seconds()}
	for _, conc := range cfg.Concurrency {
		for _, batch := range cfg.Batches {
			producers := min(cfg.Producers, conc)
			row, err := sweepCell(ctx, c, cfg, stderr, producers, conc/producers, batch)
			if err != nil {
				return res, err
			}
			row.Concurrency = conc
			res.Rows = append(res.Rows, row)
		}
	}
	return res, nil
}

func sweepCell(ctx context.Context, c *client.Client, cfg config, stderr io.Writer, producers, inflight, batch int) (sweepRow, error) {
	queue := queueName(cfg, "sweep")
	if err := createQueue(ctx, c, queue, defaultQueue(cfg)); err != nil {
		return sweepRow{}, err
	}
	defer deleteQueue(c, queue)
	l := newLoad(c, queue, loadSpec{producers: producers, inflight: inflight, sendBatch: 1,
		consumers: cfg.Consumers, batch: batch, asyncAck: cfg.AckMode == "async", size: cfg.Size, seed: cfg.Seed})
	var rl rateLine
	phase := fmt.Sprintf("sweep %dx%d b%d", producers, inflight, batch)
	prog := startProgress(ctx, stderr, cfg.Quiet, cfg.ProgressEvery, func(e time.Duration) string {
		return rl.format(phase, e, l.enqueued.Load(), l.processed.Load())
	})
	defer prog.done()
	cctx, stopConsumers := context.WithCancel(ctx)
	defer stopConsumers()
	l.startConsumers(cctx)
	l.startProducers(ctx)
	sleep(ctx, cfg.Warmup)
	l.measuring.Store(true)
	a := l.snapshot()
	sleep(ctx, cfg.Duration)
	b := l.snapshot()
	l.measuring.Store(false)
	l.stopProducers()
	stopConsumers()
	l.consWG.Wait()
	if ctx.Err() != nil {
		return sweepRow{}, fmt.Errorf("sweep: interrupted: %w", ctx.Err())
	}
	enq, claim, ready, e2e := l.enqueue.summary(), l.claim.summary(), l.readyClaim.summary(), l.e2e.summary()
	return sweepRow{
		Producers: producers, Inflight: inflight, Batch: batch,
		EnqueuePerS:   rate(a, b, func(c counters) uint64 { return c.enqueued }),
		ProcessedPerS: rate(a, b, func(c counters) uint64 { return c.processed }),
		EnqueueP99:    enq.P99, ClaimP50: claim.P50, ClaimP99: claim.P99, ReadyClaimP99: ready.P99, E2EP99: e2e.P99,
		Errors:       l.sendErrs.Load() + l.recvErrs.Load() + l.ackErrs.Load(),
		ReceiveCalls: l.recvCalls.Load(), ReceiveEmpty: l.recvEmpty.Load(),
	}, nil
}
