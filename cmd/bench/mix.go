package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/worker"
)

// msgKey names a message in the ledger.
type msgKey struct {
	producer uint32
	seq      uint64
}

// Message kinds of the mix, chosen per message from the seed.
const (
	kindFast   = "fast"   // 70%: 1-5 ms
	kindSlow   = "slow"   // 20%: 200 ms-2 s, often longer than the lease
	kindFlap   = "flap"   // 5%: fails on its first delivery, then succeeds
	kindPoison = "poison" // 5%: always fails; dead after max receives
)

// mixKind picks message i's kind and handler time, the same for a seed on
// every run and every delivery.
func mixKind(seed uint64, i uint64) (string, time.Duration) {
	r := rand.New(rand.NewPCG(seed, i))
	p := r.IntN(100)
	switch {
	case p < 70:
		return kindFast, time.Millisecond + time.Duration(r.Int64N(int64(4*time.Millisecond)))
	case p < 90:
		return kindSlow, 200*time.Millisecond + time.Duration(r.Int64N(int64(1800*time.Millisecond)))
	case p < 95:
		return kindFlap, time.Millisecond
	default:
		return kindPoison, time.Millisecond
	}
}

type mixResult struct {
	Workload    string         `json:"workload"`
	Revision    string         `json:"revision,omitempty"`
	Placement   placement      `json:"placement"`
	Messages    int            `json:"messages"`
	Sent        map[string]int `json:"sent"`
	Concurrency int            `json:"concurrency"`
	VisibilityS float64        `json:"visibility_s"`
	MaxReceives int            `json:"max_receives"`
	TookS       float64        `json:"took_s"`
	PerS        float64        `json:"settled_per_s"`
	Outcomes    map[string]int `json:"outcomes"`
	// SlowPastLease counts slow handlers that ran longer than the lease and
	// were still acked: the worker's heartbeat extended them.
	SlowPastLease int    `json:"slow_past_lease_acked"`
	DLQ           int    `json:"dlq"`
	DLQWrongCount int    `json:"dlq_wrong_receive_count"`
	DLQNotPoison  int    `json:"dlq_not_poison"`
	Lost          uint64 `json:"lost"`
	// Redeliveries counts deliveries beyond a message's first; expected
	// is one per flapping message and max-1 per poison message (more only
	// if a lease was lost).
	Redeliveries         uint64  `json:"redeliveries"`
	ExpectedRedeliveries uint64  `json:"expected_redeliveries"`
	FastP99              float64 `json:"fast_e2e_p99_ms"`
	Errors               uint64  `json:"send_errors"`
	LastError            string  `json:"last_error,omitempty"`
	fastE2E              summary
}

func (r *mixResult) rows() [][2]string {
	return [][2]string{
		{"workload", fmt.Sprintf("mix (revision %s)", r.Revision)},
		{"leaders", r.Placement.row()},
		{"sent", fmt.Sprintf("%d: fast %d, slow %d, flapping %d, poison %d", r.Messages, r.Sent[kindFast], r.Sent[kindSlow], r.Sent[kindFlap], r.Sent[kindPoison])},
		{"worker", fmt.Sprintf("concurrency %d, lease %.1fs (extended every third), max receives %d", r.Concurrency, r.VisibilityS, r.MaxReceives)},
		{"took", fmt.Sprintf("%.1fs (%.0f settled msgs/s)", r.TookS, r.PerS)},
		{"outcomes", fmt.Sprint(r.Outcomes)},
		{"slow past lease, acked", fmt.Sprint(r.SlowPastLease)},
		{"DLQ", fmt.Sprintf("%d (expected %d); wrong receive count %d; not poison %d", r.DLQ, r.Sent[kindPoison], r.DLQWrongCount, r.DLQNotPoison)},
		{"fast end to end", lat(r.fastE2E)},
		{"lost", u(r.Lost)},
		{"redeliveries", fmt.Sprintf("%d (expected %d: flapping once, poison %d times)", r.Redeliveries, r.ExpectedRedeliveries, r.MaxReceives-1)},
		{"send errors", u(r.Errors)},
	}
}

func runMix(ctx context.Context, cfg config, stderr io.Writer) (result, error) {
	c, where, err := dial(ctx, cfg, stderr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	queue := queueName(cfg, "mix")
	// Short backoff so poison reaches the DLQ within the run.
	if err := createQueue(ctx, c, queue, client.QueueOptions{
		Visibility: cfg.Visibility, MaxReceives: uint32(cfg.MaxReceives),
		BackoffBase: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
	}); err != nil {
		return nil, err
	}
	defer deleteQueue(c, queue)

	r := &mixResult{Workload: "mix", Revision: revision(), Placement: where, Messages: cfg.Messages, Sent: map[string]int{},
		Concurrency: cfg.Consumers, VisibilityS: cfg.Visibility.Seconds(), MaxReceives: cfg.MaxReceives, Outcomes: map[string]int{}}
	led := newLedger(cfg.Producers)
	fill := filler(cfg.Seed, cfg.Size)
	fastE2E := newLatency()
	var (
		mu            sync.Mutex
		ackedUnique   = map[msgKey]bool{}
		slowPastLease int
		sendErrs      atomic.Uint64
		lastErr       atomic.Value
	)
	kindOf := func(h header) (string, time.Duration) {
		return mixKind(cfg.Seed, uint64(h.Producer)<<40|h.Seq)
	}

	w, err := worker.New(c, queue, worker.Options{
		Concurrency: cfg.Consumers, Batch: cfg.Batch, Visibility: cfg.Visibility, Wait: 2 * time.Second,
		DrainTimeout: 5 * time.Second,
		// The mix fails messages on purpose and counts every outcome in
		// its report: a log line per failure would bury it.
		Logger: slog.New(slog.DiscardHandler),
		Hooks: worker.Hooks{Settled: func(m *worker.Message, s worker.Settlement) {
			h, err := decode(m.Body)
			mu.Lock()
			defer mu.Unlock()
			r.Outcomes[string(s.Outcome)]++
			if err != nil || s.Outcome != worker.Acked {
				return
			}
			ackedUnique[msgKey{h.Producer, h.Seq}] = true
			if k, _ := kindOf(h); k == kindSlow && s.Took > cfg.Visibility {
				slowPastLease++
			}
		}},
	})
	if err != nil {
		return nil, err
	}
	w.Default(func(ctx context.Context, m *worker.Message) error {
		h, err := decode(m.Body)
		if err != nil {
			return worker.Poison(err)
		}
		led.delivered(h)
		kind, d := kindOf(h)
		if kind == kindFast {
			fastE2E.record(time.Since(h.Sent))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("handler cut short: %w", context.Cause(ctx))
		case <-time.After(d):
		}
		switch {
		case kind == kindPoison:
			return errors.New("poison: always fails")
		case kind == kindFlap && m.ReceiveCount == 1:
			return errors.New("flapping: fails on the first delivery")
		}
		return nil
	})
	wctx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	var wg sync.WaitGroup
	var runErr error
	wg.Go(func() { runErr = w.Run(wctx) })

	start := time.Now()
	var sent atomic.Int64
	var sentMu sync.Mutex
	var pwg sync.WaitGroup
	perProducer := (cfg.Messages + cfg.Producers - 1) / cfg.Producers
	for p := range cfg.Producers {
		pwg.Go(func() {
			for range perProducer {
				if sent.Add(1) > int64(cfg.Messages) || ctx.Err() != nil {
					return
				}
				seq := led.next(p)
				h := header{Producer: uint32(p), Seq: seq, Sent: time.Now()}
				kind, _ := kindOf(h)
				_, err := c.Send(ctx, queue, encode(h, fill), client.Type(kind))
				led.sent(p, seq, err == nil)
				if err != nil {
					sendErrs.Add(1)
					lastErr.Store(err.Error())
					continue
				}
				sentMu.Lock()
				r.Sent[kind]++
				sentMu.Unlock()
			}
		})
	}
	pwg.Wait()

	// Done when every acked non-poison message was acked by a handler and
	// every poison message is dead.
	prog := startProgress(ctx, stderr, cfg.Quiet, cfg.ProgressEvery, func(e time.Duration) string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("[mix %5.0fs] acked %d  outcomes %v", e.Seconds(), len(ackedUnique), r.Outcomes)
	})
	defer prog.done()
	wantAcked := r.Sent[kindFast] + r.Sent[kindSlow] + r.Sent[kindFlap]
	deadline := time.Now().Add(cfg.DrainLimit)
	var dead uint64
	for ctx.Err() == nil && time.Now().Before(deadline) {
		mu.Lock()
		got := len(ackedUnique)
		mu.Unlock()
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		st, err := c.Stats(sctx, queue)
		cancel()
		if err == nil {
			dead = st.Dead
		}
		if got >= wantAcked && dead >= uint64(r.Sent[kindPoison]) {
			break
		}
		sleep(ctx, 200*time.Millisecond)
	}
	r.TookS = time.Since(start).Seconds()
	stopWorker()
	wg.Wait()
	prog.done()

	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	deadMsgs, derr := c.ListDead(lctx, queue, min(max(r.Sent[kindPoison]+10, 1), 1000))
	cancel()
	r.DLQ = int(dead)
	for _, m := range deadMsgs {
		if m.ReceiveCount != uint32(cfg.MaxReceives) {
			r.DLQWrongCount++
		}
		if m.Type != kindPoison {
			r.DLQNotPoison++
		}
	}
	mu.Lock()
	r.SlowPastLease = slowPastLease
	var lost uint64
	for p := range led.producers {
		for s := range led.producers[p].state {
			h := header{Producer: uint32(p), Seq: uint64(s)}
			k, _ := kindOf(h)
			if sendState(led.producers[p].state[s]) == sendAcked && k != kindPoison && !ackedUnique[msgKey{h.Producer, h.Seq}] {
				lost++
			}
		}
	}
	mu.Unlock()
	r.Lost = lost
	r.Redeliveries = led.tally().Duplicates
	r.ExpectedRedeliveries = uint64(r.Sent[kindFlap] + r.Sent[kindPoison]*(cfg.MaxReceives-1))
	r.PerS = float64(cfg.Messages) / r.TookS
	r.Errors = sendErrs.Load()
	if s, ok := lastErr.Load().(string); ok {
		r.LastError = s
	}
	r.fastE2E = fastE2E.summary()
	r.FastP99 = r.fastE2E.P99
	switch {
	case ctx.Err() != nil:
		return r, fmt.Errorf("mix: interrupted: %w", ctx.Err())
	case runErr != nil:
		return r, fmt.Errorf("mix: worker: %w", runErr)
	case derr != nil:
		return r, fmt.Errorf("mix: %w", derr)
	case lost > 0:
		return r, fmt.Errorf("%w: %d acknowledged non-poison messages never acked by a handler", errFailed, lost)
	case r.DLQ != r.Sent[kindPoison] || r.DLQWrongCount > 0 || r.DLQNotPoison > 0:
		return r, fmt.Errorf("%w: DLQ holds %d (want %d poison), %d with a receive count other than %d, %d not poison",
			errFailed, r.DLQ, r.Sent[kindPoison], r.DLQWrongCount, cfg.MaxReceives, r.DLQNotPoison)
	}
	return r, nil
}
