package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raftq/raftq/client"
)

// handBack gives a job of a type whose circuit is open back unrun, ready
// again after wait, without using up an attempt (client.Snooze).
func (r *run) handBack(j *job, wait time.Duration) {
	if !j.claimed.CompareAndSwap(false, true) {
		return // the drain released it first
	}
	defer r.forget(j)
	ctx, cancel := context.WithTimeout(r.settleBase, r.w.opts.SettleTimeout)
	defer cancel()
	reason := fmt.Sprintf("circuit open for message type %q", j.m.Type)
	s := Settlement{Outcome: CircuitOpen}
	// Rounded up to whole milliseconds, the unit of a snooze, so the job
	// never comes back before the cool-down ends.
	delay := min((wait + time.Millisecond - 1).Truncate(time.Millisecond), client.MaxDelay)
	if err := r.w.release(ctx, j.m.Receipt, delay, reason); err != nil {
		r.w.opts.Logger.Warn("raftq worker could not hand a message back", "queue", r.w.queue, "id", j.m.ID, "err", err)
		s.Outcome, s.SettleErr = SettleFailed, err
	}
	r.report(j.m, s)
}

// release hands a lease back after delay without using up an attempt
// (client.Snooze). While a replica of the message's shard predates
// snooze (a rolling upgrade, client.ErrUpgradePending) it nacks instead:
// that uses an attempt, as a release did before snooze, but the job comes
// back now rather than when its lease runs out.
func (w *Worker) release(ctx context.Context, receipt string, delay time.Duration, reason string) error {
	err := w.c.Snooze(ctx, receipt, client.SnoozeOptions{Delay: delay, Reason: errorText(reason)})
	if !errors.Is(err, client.ErrUpgradePending) {
		return err
	}
	return w.c.Nack(ctx, receipt, client.NackOptions{Delay: delay, ReadyNow: delay == 0, Error: errorText(reason)})
}
