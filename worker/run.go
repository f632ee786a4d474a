package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftq/raftq/client"
)

// run is the state of one Run call.
type run struct {
	w          *Worker
	slots      chan struct{} // one token per in-flight message
	base       context.Context
	stop       context.CancelFunc // cancels every handler (drain timeout)
	settleBase context.Context

	wg   sync.WaitGroup
	mu   sync.Mutex
	jobs map[*job]struct{} // in flight, not yet settled
}

// job is one delivery in flight.
type job struct {
	m       *Message
	cancel  context.CancelCauseFunc
	claimed atomic.Bool // set by whoever settles the message, exactly once
	lost    atomic.Bool
}

func newRun(ctx context.Context, w *Worker) *run {
	// Handlers outlive ctx by up to DrainTimeout, so their contexts hang off
	// a base that only the drain cancels; values of ctx stay visible.
	base, stop := context.WithCancel(context.WithoutCancel(ctx))
	return &run{
		w:          w,
		slots:      make(chan struct{}, w.opts.Concurrency),
		base:       base,
		stop:       stop,
		settleBase: context.WithoutCancel(ctx),
		jobs:       map[*job]struct{}{},
	}
}

// receiveLoop long-polls for as many messages as there are free slots.
func (r *run) receiveLoop(ctx context.Context) error {
	o := r.w.opts
	failures := 0
	for {
		select {
		case r.slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		n := 1
	fill:
		for n < o.Batch {
			select {
			case r.slots <- struct{}{}:
				n++
			default:
				break fill
			}
		}
		msgs, err := r.w.c.Receive(ctx, r.w.queue, client.ReceiveOptions{Max: n, Wait: o.Wait, Visibility: o.Visibility, Consumer: o.Consumer})
		for range n - len(msgs) {
			<-r.slots
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if fatalReceive(err) {
				return fmt.Errorf("worker for %q: %w", r.w.queue, err)
			}
			failures++
			d := min(time.Duration(failures)*100*time.Millisecond, 5*time.Second)
			o.Logger.Warn("raftq worker receive failed", "queue", r.w.queue, "err", err, "retry_in", d)
			sleepCtx(ctx, d)
			continue
		}
		failures = 0
		if o.Hooks.Received != nil {
			o.Hooks.Received(len(msgs))
		}
		for _, m := range msgs {
			r.start(&Message{Message: *m})
		}
	}
}

// start runs one message's handler and heartbeat; its slot is already taken.
func (r *run) start(m *Message) {
	hctx, cancel := context.WithCancelCause(r.base)
	j := &job{m: m, cancel: cancel}
	r.mu.Lock()
	r.jobs[j] = struct{}{}
	r.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer func() { <-r.slots }()
		hbDone := make(chan struct{})
		hbCtx, hbStop := context.WithCancel(hctx)
		go func() {
			defer close(hbDone)
			r.heartbeat(hbCtx, j)
		}()
		began := time.Now()
		err := r.call(hctx, j.m)
		hbStop()
		<-hbDone
		cancel(nil)
		r.settle(j, err, time.Since(began))
	}()
}

// call runs the handler, turning a panic into an error.
func (r *run) call(ctx context.Context, m *Message) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, stackHead(debug.Stack(), 12))
		}
	}()
	return r.w.handler(m.Type)(ctx, m)
}

// stackHead keeps the first lines of a stack: enough to find the panic site
// without filling the message's last-error field.
func stackHead(stack []byte, lines int) string {
	parts := strings.SplitN(string(stack), "\n", lines+1)
	return strings.Join(parts[:min(lines, len(parts))], "\n")
}

// heartbeat extends the lease every ExtendEvery until ctx ends. A stale
// receipt means another delivery owns the message: cancel the handler.
func (r *run) heartbeat(ctx context.Context, j *job) {
	o := r.w.opts
	t := time.NewTicker(o.ExtendEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_, err := r.w.c.Extend(ctx, j.m.Receipt, o.Visibility)
		switch {
		case err == nil:
		case errors.Is(err, client.ErrStaleReceipt) || errors.Is(err, client.ErrNotFound):
			j.lost.Store(true)
			o.Logger.Warn("raftq worker lost a lease", "queue", r.w.queue, "id", j.m.ID, "err", err)
			j.cancel(fmt.Errorf("%w: %w", ErrLeaseLost, err))
			return
		case ctx.Err() != nil:
			return
		default:
			// The lease may still be fine; the next beat tries again.
			o.Logger.Warn("raftq worker lease extension failed", "queue", r.w.queue, "id", j.m.ID, "err", err)
		}
	}
}

// settle acks, nacks or dead-letters by the handler's result, unless the
// drain already released the message.
func (r *run) settle(j *job, herr error, took time.Duration) {
	if !j.claimed.CompareAndSwap(false, true) {
		return
	}
	defer r.forget(j)
	if j.lost.Load() {
		r.report(j.m, LeaseLost, took)
		return
	}
	ctx, cancel := context.WithTimeout(r.settleBase, r.w.opts.SettleTimeout)
	defer cancel()
	var (
		outcome Outcome
		err     error
		retry   *RetryError
	)
	switch {
	case herr == nil:
		outcome = Acked
		var items []error
		if items, err = r.w.c.Ack(ctx, j.m.Receipt); err == nil {
			err = items[0]
		}
	case errors.Is(herr, ErrPoison):
		outcome = DeadLettered
		err = r.w.c.DeadLetter(ctx, j.m.Receipt, herr.Error())
	case errors.As(herr, &retry):
		outcome = Retried
		err = r.w.c.Nack(ctx, j.m.Receipt, client.NackOptions{Delay: &retry.After, Error: retry.Err.Error()})
	default:
		outcome = Nacked
		err = r.w.c.Nack(ctx, j.m.Receipt, client.NackOptions{Error: herr.Error()})
	}
	if err != nil {
		r.w.opts.Logger.Warn("raftq worker could not settle a message", "queue", r.w.queue, "id", j.m.ID, "outcome", outcome, "err", err)
		outcome = SettleFailed
	}
	r.report(j.m, outcome, took)
}

func (r *run) forget(j *job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.jobs, j)
}

func (r *run) report(m *Message, o Outcome, took time.Duration) {
	if h := r.w.opts.Hooks.Settled; h != nil {
		h(m, o, took)
	}
}

// drain waits for in-flight handlers up to DrainTimeout, then cancels the
// rest and releases their messages with no delay. Handlers that ignore
// their context are waited for at most SettleTimeout more.
func (r *run) drain() {
	defer r.stop()
	done := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(r.w.opts.DrainTimeout)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	r.mu.Lock()
	var left []*job
	for j := range r.jobs {
		if j.claimed.CompareAndSwap(false, true) {
			left = append(left, j)
		}
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	zero := time.Duration(0)
	for _, j := range left {
		j.cancel(ErrShutdown)
		wg.Go(func() {
			defer r.forget(j)
			ctx, cancel := context.WithTimeout(r.settleBase, r.w.opts.SettleTimeout)
			defer cancel()
			outcome := Released
			if err := r.w.c.Nack(ctx, j.m.Receipt, client.NackOptions{Delay: &zero, Error: ErrShutdown.Error()}); err != nil {
				r.w.opts.Logger.Warn("raftq worker could not release a message", "queue", r.w.queue, "id", j.m.ID, "err", err)
				outcome = SettleFailed
			}
			r.report(j.m, outcome, 0)
		})
	}
	wg.Wait()
	t.Reset(r.w.opts.SettleTimeout)
	select {
	case <-done:
	case <-t.C:
		r.w.opts.Logger.Warn("raftq worker returns with handlers that ignore cancellation still running", "queue", r.w.queue)
	}
}
