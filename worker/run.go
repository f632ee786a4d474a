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
	"go.opentelemetry.io/otel/trace"
)

// run is the state of one Run call.
type run struct {
	w          *Worker
	slots      chan struct{} // one token per in-flight message
	base       context.Context
	stop       context.CancelFunc // cancels every handler (drain timeout)
	settleBase context.Context
	tr         *tracer // nil: tracing off

	wg   sync.WaitGroup
	mu   sync.Mutex
	jobs map[*job]struct{} // in flight, not yet settled
}

// job is one delivery in flight.
type job struct {
	r       *run
	m       *Message
	cancel  context.CancelCauseFunc
	claimed atomic.Bool // set by whoever settles the message, exactly once
	lost    atomic.Bool
	lostErr error       // the extension that found the lease gone; set before lost
	probe   atomic.Bool // runs as its type's circuit probe (breaker.go)

	// deadline is when the job's execution timeout ends (zero: none),
	// timeout its length; set before its heartbeat starts.
	deadline time.Time
	timeout  time.Duration

	// extendMu orders the lease extensions of this delivery (heartbeats
	// and Message.ExtendLease), so one computed from an older wish cannot
	// land after a newer one and shorten the lease. until is the latest
	// deadline the handler asked for.
	extendMu sync.Mutex
	until    time.Time

	// result is what the handler set with Message.SetResult; the ack
	// carries it (result.go).
	result atomic.Pointer[[]byte]

	span trace.Span // the handler's span; nil without tracing (tracing.go)
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
		tr:         newTracer(w.opts.Tracing, w.queue),
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
			r.start(m)
		}
	}
}

// start runs one message's handler and heartbeat; its slot is already taken.
// A job whose type's circuit is open is handed back unrun instead.
func (r *run) start(cm *client.Message) {
	// lctx ends when the lease is lost or the drain gives up on the
	// handler; hctx is lctx bounded by the job's execution timeout.
	lctx, cancel := context.WithCancelCause(r.base)
	j := &job{r: r, cancel: cancel}
	j.m = &Message{Message: *cm, j: j}
	lctx = r.tr.startJob(lctx, j)
	r.mu.Lock()
	r.jobs[j] = struct{}{}
	r.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer func() { <-r.slots }()
		defer cancel(nil)
		ok, probe, wait := r.w.brk.admit(j.m.Type)
		if !ok {
			r.handBack(j, wait)
			return
		}
		j.probe.Store(probe)
		hctx := lctx
		if d := r.w.timeoutOf(j.m); d > 0 {
			// Set before the heartbeat starts, which reads them.
			j.timeout, j.deadline = d, time.Now().Add(d)
			var stop context.CancelFunc
			hctx, stop = context.WithDeadlineCause(lctx, j.deadline, ErrTimeout)
			defer stop()
		}
		hbDone := make(chan struct{})
		hbCtx, hbStop := context.WithCancel(lctx)
		go func() {
			defer close(hbDone)
			r.heartbeat(hbCtx, j)
		}()
		began := time.Now()
		done := r.w.handlerStarted()
		err := r.call(hctx, j.m)
		done()
		took := time.Since(began)
		if err != nil && errors.Is(context.Cause(hctx), ErrTimeout) {
			err = &timeoutError{after: j.timeout, err: err}
		}
		r.tell(hctx, j.m, err)
		hbStop()
		<-hbDone
		cancel(nil)
		r.settle(j, err, took)
	}()
}

// call runs the handler with its middleware, turning a panic into a
// *PanicError.
func (r *run) call(ctx context.Context, m *Message) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &PanicError{Value: p, Stack: debug.Stack()}
		}
	}()
	return r.w.handler(m.Type)(ctx, m)
}

// tell hands a failed handler's error to OnError or OnPanic, or logs it:
// a worker process must show why its messages fail.
func (r *run) tell(ctx context.Context, m *Message, err error) {
	var snooze *SnoozeError
	if err == nil || errors.As(err, &snooze) {
		return // a snooze is no failure
	}
	o := r.w.opts
	var p *PanicError
	if errors.As(err, &p) {
		if o.OnPanic != nil {
			o.OnPanic(ctx, m, p.Value, p.Stack)
			return
		}
		o.Logger.Error("raftq worker handler panicked", "queue", r.w.queue, "id", m.ID, "type", m.Type,
			"receive_count", m.ReceiveCount, "panic", fmt.Sprint(p.Value), "stack", string(p.Stack))
		return
	}
	if o.OnError != nil {
		o.OnError(ctx, m, err)
		return
	}
	o.Logger.Warn("raftq worker handler failed", "queue", r.w.queue, "id", m.ID, "type", m.Type,
		"receive_count", m.ReceiveCount, "err", err)
}

// stackHead keeps the first lines of a stack: enough to find the panic site
// without filling the message's last-error field.
func stackHead(stack []byte, lines int) string {
	parts := strings.SplitN(string(stack), "\n", lines+1)
	return strings.Join(parts[:min(lines, len(parts))], "\n")
}

// heartbeat extends the lease every ExtendEvery until ctx ends. A stale
// receipt means another delivery owns the message: cancel the handler. A
// job with a timeout whose handler has not returned by half its grace past
// the deadline is nacked from here (overdue).
func (r *run) heartbeat(ctx context.Context, j *job) {
	o := r.w.opts
	t := time.NewTicker(o.ExtendEvery)
	defer t.Stop()
	var overdue <-chan time.Time
	if !j.deadline.IsZero() {
		ot := time.NewTimer(time.Until(j.deadline.Add(o.TimeoutGrace / 2)))
		defer ot.Stop()
		overdue = ot.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-overdue:
			r.settleOverdue(j)
			return
		case <-t.C:
		}
		_, err := j.extend(ctx, 0)
		switch {
		case j.lost.Load(), ctx.Err() != nil:
			return
		case errors.Is(err, errPastDeadline):
			// The lease already reaches the deadline's grace; nothing to do.
		case err != nil:
			// The lease may still be fine; the next beat tries again.
			o.Logger.Warn("raftq worker lease extension failed", "queue", r.w.queue, "id", j.m.ID, "err", err)
		}
	}
}

// extend extends the lease to the later of Visibility from now and the
// deadline the handler asked for (want, if later than asked before, is a
// new wish of d from now). A stale receipt marks the lease lost and
// cancels the handler.
func (j *job) extend(ctx context.Context, want time.Duration) (time.Time, error) {
	j.extendMu.Lock()
	defer j.extendMu.Unlock()
	now := time.Now()
	if until := now.Add(want); want > 0 && until.After(j.until) {
		j.until = until
	}
	d := max(j.r.w.opts.Visibility, j.until.Sub(now))
	if !j.deadline.IsZero() {
		// Never past the deadline and its grace: a hung handler must not
		// hold its job beyond its timeout.
		d = min(d, j.deadline.Add(j.r.w.opts.TimeoutGrace).Sub(now))
		if d < time.Millisecond {
			return time.Time{}, errPastDeadline
		}
	}
	dl, err := j.r.w.c.Extend(ctx, j.m.Receipt, min(d, client.MaxVisibility))
	if errors.Is(err, client.ErrStaleReceipt) || errors.Is(err, client.ErrNotFound) {
		j.lostErr = err
		if j.lost.CompareAndSwap(false, true) {
			j.r.w.opts.Logger.Warn("raftq worker lost a lease", "queue", j.r.w.queue, "id", j.m.ID, "err", err)
			j.cancel(fmt.Errorf("%w: %w", ErrLeaseLost, err))
		}
	}
	return dl, err
}

// ExtendLease asks for the message's lease to last at least d from now
// (at most client.MaxVisibility), for a step known to outlast the
// worker's Visibility, and returns the new deadline. The heartbeats go on
// and never shorten it: each extends to whichever ends later, Visibility
// from then or this deadline. A job with a timeout keeps its lease no
// later than its deadline plus Options.TimeoutGrace. A lost lease cancels
// the handler's context, as a heartbeat that finds it lost does.
func (m *Message) ExtendLease(ctx context.Context, d time.Duration) (time.Time, error) {
	if m.j == nil {
		return time.Time{}, fmt.Errorf("extend lease of %s: %w", m.ID, errNotDelivered)
	}
	if d <= 0 || d > client.MaxVisibility {
		return time.Time{}, fmt.Errorf("extend lease of %s: %w: %v outside (0, %v]", m.ID, client.ErrInvalid, d, client.MaxVisibility)
	}
	dl, err := m.j.extend(ctx, d)
	if err != nil {
		return time.Time{}, fmt.Errorf("extend lease of %s: %w", m.ID, err)
	}
	return dl, nil
}

var (
	errNotDelivered = errors.New("the message was not delivered by a running worker")
	errPastDeadline = errors.New("the job is past its execution timeout")
)

// settle acks, nacks or dead-letters by the handler's result, unless the
// drain already released the message.
func (r *run) settle(j *job, herr error, took time.Duration) {
	if !j.claimed.CompareAndSwap(false, true) {
		return
	}
	defer r.forget(j)
	if j.lost.Load() {
		r.w.brk.done(j.m.Type, j.probe.Load(), neutral)
		r.report(j.m, Settlement{Outcome: LeaseLost, Took: took, Err: herr, SettleErr: j.lostErr})
		return
	}
	r.w.brk.done(j.m.Type, j.probe.Load(), verdictOf(herr))
	ctx, cancel := context.WithTimeout(j.spanContext(r.settleBase), r.w.opts.SettleTimeout)
	defer cancel()
	var (
		outcome  Outcome
		err      error
		retry    *RetryError
		snooze   *SnoozeError
		panicked *PanicError
	)
	switch {
	case herr == nil:
		outcome = Acked
		err = j.ack(ctx)
	case errors.As(herr, &panicked):
		outcome = Panicked
		err = r.w.c.Nack(ctx, j.m.Receipt, client.NackOptions{Error: errorText(fmt.Sprintf("%v\n%s", herr, stackHead(panicked.Stack, 12)))})
	case errors.Is(herr, ErrTimeout):
		outcome = TimedOut
		err = r.w.c.Nack(ctx, j.m.Receipt, client.NackOptions{Error: errorText(herr.Error())})
	case errors.Is(herr, ErrPoison):
		outcome = DeadLettered
		err = r.w.c.DeadLetter(ctx, j.m.Receipt, errorText(herr.Error()))
	case errors.As(herr, &snooze):
		outcome = Snoozed
		err = r.w.c.Snooze(ctx, j.m.Receipt, client.SnoozeOptions{Delay: min(snooze.After, client.MaxDelay), Reason: "snoozed by the handler"})
	case errors.As(herr, &retry):
		outcome = Retried
		opts := client.NackOptions{Delay: retry.After, ReadyNow: retry.After == 0, Error: errorText(retry.Err.Error())}
		err = r.w.c.Nack(ctx, j.m.Receipt, opts)
	default:
		outcome = Nacked
		err = r.w.c.Nack(ctx, j.m.Receipt, client.NackOptions{Error: errorText(herr.Error())})
	}
	s := Settlement{Outcome: outcome, Took: took, Err: herr}
	if err != nil {
		r.w.opts.Logger.Warn("raftq worker could not settle a message", "queue", r.w.queue, "id", j.m.ID, "outcome", outcome, "err", err)
		s.Outcome, s.SettleErr = SettleFailed, err
	}
	r.report(j.m, s)
}

func (r *run) forget(j *job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.jobs, j)
}

func (r *run) report(m *Message, s Settlement) {
	endJob(m.j, s)
	r.w.observe(m, s)
	if h := r.w.opts.Hooks.Settled; h != nil {
		h(m, s)
	}
}

// drain waits for in-flight handlers up to DrainTimeout, then cancels the
// rest and releases their messages with no delay and without using up an
// attempt (client.Snooze): a healthy job on its last allowed receive must
// not be dead-lettered because its worker stopped. Handlers that ignore
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
	for _, j := range left {
		j.cancel(ErrShutdown)
		wg.Go(func() {
			defer r.forget(j)
			r.w.brk.done(j.m.Type, j.probe.Load(), neutral)
			ctx, cancel := context.WithTimeout(r.settleBase, r.w.opts.SettleTimeout)
			defer cancel()
			s := Settlement{Outcome: Released, Err: ErrShutdown}
			if err := r.w.release(ctx, j.m.Receipt, 0, ErrShutdown.Error()); err != nil {
				r.w.opts.Logger.Warn("raftq worker could not release a message", "queue", r.w.queue, "id", j.m.ID, "err", err)
				s.Outcome, s.SettleErr = SettleFailed, err
			}
			r.report(j.m, s)
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
