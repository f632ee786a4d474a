package main

import (
	"context"
	"fmt"
	"github.com/raftq/raftq/client"
	"io"
	"strings"
	"time"
)

// steadyResult is the steady workload's report. The flat *_ms and *_per_s
// fields are the stable interface for scripts.
type steadyResult struct {
	Workload  string    `json:"workload"`
	Revision  string    `json:"revision,omitempty"`
	Placement placement `json:"placement"`
	Addrs     []string  `json:"addrs"`
	Producers int       `json:"producers"`
	Consumers int       `json:"consumers"`
	Size      int       `json:"size"`
	Inflight  int       `json:"inflight"`
	SendBatch int       `json:"send_batch"`
	SendMode  string    `json:"send_mode"`
	Batch     int       `json:"batch"`
	AckMode   string    `json:"ack_mode"`
	Rate      float64   `json:"rate_limit,omitempty"`
	// DedupWindowS is the queue's dedup window when --dedup-window set it.
	DedupWindowS float64 `json:"dedup_window_s,omitempty"`
	WarmupS      float64 `json:"warmup_s"`
	DurationS    float64 `json:"duration_s"`

	EnqueuePerS   float64 `json:"enqueue_per_s"`
	ProcessedPerS float64 `json:"processed_per_s"`
	EnqueueP50    float64 `json:"enqueue_p50_ms"`
	EnqueueP99    float64 `json:"enqueue_p99_ms"`
	EnqueueP999   float64 `json:"enqueue_p999_ms"`
	ClaimP50      float64 `json:"claim_p50_ms"`
	ClaimP99      float64 `json:"claim_p99_ms"`
	// ReadyClaim is the receive call less the server's long-poll wait
	// (claim is the whole call): the claim bar's reading when consumers
	// keep up and mostly wait.
	ReadyClaimP50 float64 `json:"ready_claim_p50_ms"`
	ReadyClaimP99 float64 `json:"ready_claim_p99_ms"`
	AckP99        float64 `json:"ack_p99_ms"`
	E2EP50        float64 `json:"e2e_p50_ms"`
	E2EP99        float64 `json:"e2e_p99_ms"`
	Redelivered   uint64  `json:"redelivered"`
	Duplicates    uint64  `json:"duplicates"`
	Lost          uint64  `json:"lost"`
	Unknown       uint64  `json:"unknown_sends"`
	SendErrors    uint64  `json:"send_errors"`
	ReceiveErrors uint64  `json:"receive_errors"`
	AckErrors     uint64  `json:"ack_errors"`
	ReceiveCalls  uint64  `json:"receive_calls"`
	ReceiveEmpty  uint64  `json:"receive_empty"`
	LastError     string  `json:"last_error,omitempty"`
	DrainS        float64 `json:"drain_s"`
	Ledger        tally   `json:"ledger"`
	// CPU is what the measured window cost the nodes and this client.
	CPU cpuUse `json:"cpu"`

	Enqueue    summary  `json:"enqueue"`
	Claim      summary  `json:"claim"`
	ReadyClaim summary  `json:"ready_claim"`
	Ack        summary  `json:"ack"`
	E2E        summary  `json:"e2e"`
	Missing    []string `json:"missing,omitempty"`
}

func (r *steadyResult) rows() [][2]string {
	mode := "Send (one message per call)"
	if r.SendMode == "async" {
		mode = "SendAsync, one goroutine per producer"
	}
	if r.SendBatch > 1 {
		mode = fmt.Sprintf("SendBatch of %d", r.SendBatch)
	}
	rows := [][2]string{
		{"workload", fmt.Sprintf("steady (revision %s)", r.Revision)},
		{"cluster", strings.Join(r.Addrs, ",")},
		{"leaders", r.Placement.row()},
		{"load", fmt.Sprintf("%d producers x %d in flight (%s), %d consumers x batch %d (%s acks), %d B bodies", r.Producers, r.Inflight, mode, r.Consumers, r.Batch, r.AckMode, r.Size)},
		{"window", fmt.Sprintf("%.0fs after %.0fs warmup", r.DurationS, r.WarmupS)},
		{"enqueue/s", f0(r.EnqueuePerS)},
		{"processed/s", f0(r.ProcessedPerS) + "  (received and acked)"},
		{"enqueue latency", lat(r.Enqueue)},
		{"receive call", lat(r.Claim) + "  (claim_*: long-poll wait included)"},
		{"claim once ready", lat(r.ReadyClaim) + "  (the call less the server's wait)"},
		{"ack latency", lat(r.Ack)},
		{"end to end", lat(r.E2E)},
		{"redelivered", u(r.Redelivered)},
		{"duplicates", u(r.Duplicates)},
		{"lost", u(r.Lost)},
		{"unknown sends", u(r.Unknown)},
		{"errors", fmt.Sprintf("send %d, receive %d, ack %d", r.SendErrors, r.ReceiveErrors, r.AckErrors)},
		{"receive calls", fmt.Sprintf("%d, %d of them empty", r.ReceiveCalls, r.ReceiveEmpty)},
		{"drain", fmt.Sprintf("%.1fs", r.DrainS)},
		{"cpu in window", r.CPU.row()},
	}
	if r.Rate > 0 {
		rows = append(rows[:4], append([][2]string{{"rate cap", f0(r.Rate) + " msgs/s"}}, rows[4:]...)...)
	}
	if r.DedupWindowS > 0 {
		rows = append(rows[:4], append([][2]string{{"dedup window", fmt.Sprintf("%gs", r.DedupWindowS)}}, rows[4:]...)...)
	}
	if r.LastError != "" {
		rows = append(rows, [2]string{"last error", r.LastError})
	}
	if len(r.Missing) > 0 {
		rows = append(rows, [2]string{"missing", strings.Join(r.Missing, " ")})
	}
	return rows
}

func runSteady(ctx context.Context, cfg config, stderr io.Writer) (result, error) {
	c, where, err := dial(ctx, cfg, stderr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	r, err := steadyOnce(ctx, c, cfg, stderr, "steady")
	if r == nil {
		return nil, err
	}
	r.Placement = where
	r.DedupWindowS = cfg.DedupWindow.Seconds()
	return r, err
}

// steadyOnce runs one steady cell: warmup, measured window, stop
// producers, drain (when verify) and the ledger check.
func steadyOnce(ctx context.Context, c *client.Client, cfg config, stderr io.Writer, phase string) (*steadyResult, error) {
	queue := queueName(cfg, phase)
	if err := createQueue(ctx, c, queue, defaultQueue(cfg)); err != nil {
		return nil, err
	}
	defer deleteQueue(c, queue)
	nodes, err := newNodeSource(cfg.Pids, cfg.Metrics)
	if err != nil {
		return nil, err
	}
	l := newLoad(c, queue, loadSpec{
		producers: cfg.Producers, inflight: cfg.Inflight, sendBatch: cfg.SendBatch, asyncSend: cfg.SendMode == "async",
		consumers: cfg.Consumers, batch: cfg.Batch, asyncAck: cfg.AckMode == "async", size: cfg.Size, seed: cfg.Seed, rate: cfg.Rate,
	})
	var rl rateLine
	prog := startProgress(ctx, stderr, cfg.Quiet, cfg.ProgressEvery, func(e time.Duration) string {
		return rl.format(phase, e, l.enqueued.Load(), l.processed.Load()) + l.intervalTails()
	})
	defer prog.done()

	cctx, stopConsumers := context.WithCancel(ctx)
	defer stopConsumers()
	l.startConsumers(cctx)
	l.startProducers(ctx)

	sleep(ctx, cfg.Warmup)
	l.measuring.Store(true)
	a, cpuA := l.snapshot(), nodes.cpu(ctx)
	sleep(ctx, cfg.Duration)
	b, cpuB := l.snapshot(), nodes.cpu(ctx)
	l.measuring.Store(false)
	l.stopProducers()

	drainTook, drainErr := l.drain(ctx, cfg.DrainLimit)
	stopConsumers()
	l.consWG.Wait()
	prog.done()

	t := l.led.tally()
	r := &steadyResult{
		Workload: "steady", Revision: revision(), Addrs: cfg.Addrs,
		Producers: cfg.Producers, Consumers: cfg.Consumers, Size: cfg.Size, Inflight: cfg.Inflight,
		SendBatch: cfg.SendBatch, SendMode: cfg.SendMode, Batch: cfg.Batch, AckMode: cfg.AckMode, Rate: cfg.Rate,
		WarmupS: cfg.Warmup.Seconds(), DurationS: b.at.Sub(a.at).Seconds(),
		EnqueuePerS:   rate(a, b, func(c counters) uint64 { return c.enqueued }),
		ProcessedPerS: rate(a, b, func(c counters) uint64 { return c.processed }),
		Enqueue:       l.enqueue.summary(), Claim: l.claim.summary(), ReadyClaim: l.readyClaim.summary(), Ack: l.ack.summary(), E2E: l.e2e.summary(),
		Redelivered: l.redelivered.Load(), Duplicates: t.Duplicates, Lost: t.Lost, Unknown: t.Unknown,
		SendErrors: l.sendErrs.Load(), ReceiveErrors: l.recvErrs.Load(), AckErrors: l.ackErrs.Load(),
		ReceiveCalls: l.recvCalls.Load(), ReceiveEmpty: l.recvEmpty.Load(),
		LastError: lastError(l), DrainS: drainTook.Seconds(), Ledger: t,
		CPU: cpuA.use(cpuB, b.processed-a.processed),
	}
	r.EnqueueP50, r.EnqueueP99, r.EnqueueP999 = r.Enqueue.P50, r.Enqueue.P99, r.Enqueue.P999
	r.ClaimP50, r.ClaimP99, r.AckP99 = r.Claim.P50, r.Claim.P99, r.Ack.P99
	r.ReadyClaimP50, r.ReadyClaimP99 = r.ReadyClaim.P50, r.ReadyClaim.P99
	r.E2EP50, r.E2EP99 = r.E2E.P50, r.E2E.P99
	if ctx.Err() != nil {
		return r, fmt.Errorf("steady: interrupted: %w", ctx.Err())
	}
	if t.Lost > 0 {
		r.Missing = l.led.missing(10)
		return r, fmt.Errorf("%w: %d acknowledged sends never delivered (%v)", errFailed, t.Lost, drainErr)
	}
	if t.Foreign > 0 {
		return r, fmt.Errorf("%w: %d deliveries of messages never sent", errFailed, t.Foreign)
	}
	return r, nil
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
