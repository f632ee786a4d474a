package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftq/raftq/client"
)

type scheduledResult struct {
	Workload     string    `json:"workload"`
	Revision     string    `json:"revision,omitempty"`
	Placement    placement `json:"placement"`
	Backlog      int       `json:"backlog"`
	SeedPerS     float64   `json:"seed_per_s"`
	ChurnRate    float64   `json:"churn_rate_limit,omitempty"`
	ChurnPerS    float64   `json:"churn_processed_per_s"`
	RefillPerS   float64   `json:"refill_per_s"`
	BacklogLow   int64     `json:"backlog_low"`
	Scheduled    int       `json:"scheduled"`
	DueS         float64   `json:"due_s"`
	LatenessP50  float64   `json:"lateness_p50_ms"`
	LatenessP99  float64   `json:"lateness_p99_ms"`
	LatenessP999 float64   `json:"lateness_p999_ms"`
	LatenessMax  float64   `json:"lateness_max_ms"`
	Early        uint64    `json:"early"`
	Lost         uint64    `json:"lost"`
	Unknown      uint64    `json:"unknown_sends"`
	Errors       string    `json:"errors"`
	LastError    string    `json:"last_error,omitempty"`
	lateness     summary
}

func (r *scheduledResult) rows() [][2]string {
	return [][2]string{
		{"workload", fmt.Sprintf("scheduled (revision %s)", r.Revision)},
		{"leaders", r.Placement.row()},
		{"backlog", fmt.Sprintf("%d seeded at %.0f msgs/s; during the run consumers drained %.0f msgs/s (cap %s), producers refilled %.0f msgs/s, lowest %d", r.Backlog, r.SeedPerS, r.ChurnPerS, capText(r.ChurnRate), r.RefillPerS, r.BacklogLow)},
		{"scheduled", fmt.Sprintf("%d messages, each due %.0fs after its send, on their own queue", r.Scheduled, r.DueS)},
		{"lateness past due", lat(r.lateness)},
		{"delivered early", u(r.Early)},
		{"lost", u(r.Lost)},
		{"unknown sends", u(r.Unknown)},
		{"errors", r.Errors},
	}
}

// runScheduled seeds a backlog, keeps consumers draining it while
// producers refill it to its seeded size (the churn: every send, receive
// and ack is a Raft write on the same shards), and meanwhile
// sends messages due at send time + --due on a second queue, read by two
// idle long-polling consumers. Lateness is receive time minus due time;
// the two queues share every shard, so the scheduler must find due
// messages among the backlog's state.
func runScheduled(ctx context.Context, cfg config, stderr io.Writer) (result, error) {
	c, where, err := dial(ctx, cfg, stderr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	bq, sq := queueName(cfg, "churn"), queueName(cfg, "sched")
	for _, q := range []string{bq, sq} {
		if err := createQueue(ctx, c, q, defaultQueue(cfg)); err != nil {
			return nil, err
		}
		defer deleteQueue(c, q)
	}
	r := &scheduledResult{Workload: "scheduled", Revision: revision(), Placement: where, Backlog: cfg.Backlog, ChurnRate: cfg.ChurnRate, Scheduled: cfg.Scheduled, DueS: cfg.Due.Seconds()}
	bl := newLoad(c, bq, loadSpec{
		producers: cfg.Producers, inflight: cfg.Inflight * cfg.SendBatch, sendBatch: cfg.SendBatch,
		consumers: cfg.Consumers, batch: cfg.Batch, asyncAck: cfg.AckMode == "async", size: cfg.Size, seed: cfg.Seed, total: cfg.Backlog,
		consumeRate: cfg.ChurnRate,
	})
	var rl rateLine
	var phase atomic.Value
	phase.Store("seed")
	// The interval's lateness shows when due messages arrive late: a run's
	// p99 cannot tell a steady tail from one stall of a few seconds.
	late := newLatency()
	prog := startProgress(ctx, stderr, cfg.Quiet, cfg.ProgressEvery, func(e time.Duration) string {
		line := rl.format(phase.Load().(string), e, bl.enqueued.Load(), bl.processed.Load())
		if p99, n := late.interval(); n > 0 {
			line += fmt.Sprintf("  due received %d, lateness p99 %.0f ms", n, p99)
		}
		return line
	})
	defer prog.done()
	start := time.Now()
	bl.startProducers(ctx)
	bl.prodWG.Wait()
	r.SeedPerS = float64(bl.enqueued.Load()) / time.Since(start).Seconds()
	if ctx.Err() != nil {
		return r, fmt.Errorf("scheduled: interrupted while seeding: %w", ctx.Err())
	}

	phase.Store("churn")
	cctx, stopChurn := context.WithCancel(ctx)
	defer stopChurn()
	bl.startConsumers(cctx)
	bl.refill.Store(true)
	bl.startProducers(ctx) // stopped by stopProducers, so no send is cut off
	hold := holdBacklog(cctx, bl, cfg.Backlog, 20*time.Millisecond)

	led := newLedger(1)
	var early, sendErrs, recvErrs atomic.Uint64
	var lastErr atomic.Value
	fill := filler(cfg.Seed+1, cfg.Size)
	sctx, stopSched := context.WithCancel(ctx)
	defer stopSched()
	var swg sync.WaitGroup
	for i := range 2 {
		swg.Go(func() {
			for sctx.Err() == nil {
				msgs, err := c.Receive(sctx, sq, client.ReceiveOptions{Max: 100, Wait: 2 * time.Second, Consumer: fmt.Sprintf("sched-%d", i)})
				if err != nil {
					if sctx.Err() == nil {
						recvErrs.Add(1)
						lastErr.Store(err.Error())
						time.Sleep(20 * time.Millisecond)
					}
					continue
				}
				got := time.Now()
				var receipts []string
				for _, m := range msgs {
					receipts = append(receipts, m.Receipt)
					h, err := decode(m.Body)
					if err != nil {
						continue
					}
					if led.delivered(h) {
						if d := got.Sub(h.Sent); d < 0 {
							early.Add(1)
						} else {
							late.record(d)
						}
					}
				}
				if len(receipts) > 0 {
					actx, cancel := context.WithTimeout(context.WithoutCancel(sctx), 30*time.Second)
					_ = c.AckBatch(actx, receipts)
					cancel()
				}
			}
		})
	}
	churnStart := bl.snapshot()
	// The sends go out asynchronously so they keep their pace over
	// --duration however long each takes to commit under the churn; one
	// goroutine books the answers in order.
	type scheduledSend struct {
		seq uint64
		p   *client.PendingSend
	}
	sent := make(chan scheduledSend, min(cfg.Scheduled, 10_000))
	var bwg sync.WaitGroup
	bwg.Go(func() {
		for s := range sent {
			_, err := s.p.Wait(context.WithoutCancel(ctx))
			led.sent(0, s.seq, err == nil)
			if err != nil {
				sendErrs.Add(1)
				lastErr.Store(err.Error())
			}
		}
	})
	pace := newPacer(float64(cfg.Scheduled) / cfg.Duration.Seconds())
	for range cfg.Scheduled {
		if err := pace.wait(ctx, 1); err != nil {
			break
		}
		seq := led.next(0)
		due := time.Now().Add(cfg.Due).Truncate(time.Millisecond) // the server keeps ms
		sent <- scheduledSend{seq: seq, p: c.SendAsync(ctx, sq, encode(header{Seq: seq, Sent: due}, fill), client.RunAt(due))}
	}
	close(sent)
	bwg.Wait()
	phase.Store("due")
	deadline := time.Now().Add(cfg.Due + cfg.DrainLimit)
	for led.outstanding() > 0 && ctx.Err() == nil && time.Now().Before(deadline) {
		sleep(ctx, 50*time.Millisecond)
	}
	churnEnd := bl.snapshot()
	stopSched()
	bl.stopProducers()
	stopChurn()
	r.BacklogLow = hold.lowest()
	swg.Wait()
	bl.consWG.Wait()
	prog.done()

	r.ChurnPerS = rate(churnStart, churnEnd, func(c counters) uint64 { return c.processed })
	r.RefillPerS = rate(churnStart, churnEnd, func(c counters) uint64 { return c.enqueued })
	r.lateness = late.summary()
	r.LatenessP50, r.LatenessP99, r.LatenessP999, r.LatenessMax = r.lateness.P50, r.lateness.P99, r.lateness.P999, r.lateness.Max
	t := led.tally()
	r.Lost, r.Unknown, r.Early = t.Lost, t.Unknown, early.Load()
	r.Errors = fmt.Sprintf("scheduled send %d, scheduled receive %d; backlog send %d, receive %d, ack %d",
		sendErrs.Load(), recvErrs.Load(), bl.sendErrs.Load(), bl.recvErrs.Load(), bl.ackErrs.Load())
	if s, ok := lastErr.Load().(string); ok {
		r.LastError = s
	} else {
		r.LastError = lastError(bl)
	}
	if ctx.Err() != nil {
		return r, fmt.Errorf("scheduled: interrupted: %w", ctx.Err())
	}
	if t.Lost > 0 {
		return r, fmt.Errorf("%w: %d acknowledged scheduled sends never delivered", errFailed, t.Lost)
	}
	return r, nil
}

// capText names a rate cap, 0 being none.
func capText(rate float64) string {
	if rate <= 0 {
		return "none"
	}
	return fmt.Sprintf("%.0f/s", rate)
}
