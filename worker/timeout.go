package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/raftq/raftq/client"
)

// timeoutOf is m's execution timeout: TimeoutFor's answer if set, else
// Options.Timeout; 0 for none.
func (w *Worker) timeoutOf(m *Message) time.Duration {
	if f := w.opts.TimeoutFor; f != nil {
		return max(f(m), 0)
	}
	return w.opts.Timeout
}

// timeoutError is a handler's result when its job ran past its timeout:
// the text the job is nacked with begins "timeout", and errors.Is finds
// ErrTimeout as well as what the handler returned.
type timeoutError struct {
	after time.Duration
	err   error // the handler's result, or nil when it never returned
}

func (e *timeoutError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("timeout: the handler ran past its %v deadline and did not return", e.after)
	}
	return fmt.Sprintf("timeout: the handler ran past its %v deadline: %v", e.after, e.err)
}

func (e *timeoutError) Unwrap() []error { return []error{ErrTimeout, e.err} }

// settleOverdue nacks a timed-out job whose handler has not returned by
// half the grace past its deadline, while the lease still stands: the
// handler ignores its context, and its job must not wait for it. The
// handler keeps its slot until it returns; its result is then dropped.
func (r *run) settleOverdue(j *job) {
	if !j.claimed.CompareAndSwap(false, true) {
		return
	}
	defer r.forget(j)
	r.w.brk.done(j.m.Type, j.probe.Load(), failed)
	herr := &timeoutError{after: j.timeout}
	r.tell(context.WithoutCancel(r.settleBase), j.m, herr)
	ctx, cancel := context.WithTimeout(r.settleBase, r.w.opts.SettleTimeout)
	defer cancel()
	s := Settlement{Outcome: TimedOut, Took: time.Since(j.deadline.Add(-j.timeout)), Err: herr}
	if err := r.w.c.Nack(ctx, j.m.Receipt, client.NackOptions{Error: errorText(herr.Error())}); err != nil {
		r.w.opts.Logger.Warn("raftq worker could not settle a message", "queue", r.w.queue, "id", j.m.ID, "outcome", TimedOut, "err", err)
		s.Outcome, s.SettleErr = SettleFailed, err
	}
	r.report(j.m, s)
}
