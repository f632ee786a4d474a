package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raftq/raftq/client"
)

// Receive makes one receive call through cl and books every message it
// returned.
func (l *Ledger) Receive(ctx context.Context, cl *client.Client, queue string, o client.ReceiveOptions) ([]*client.Message, error) {
	start := time.Now()
	ms, err := cl.Receive(ctx, queue, o)
	end := time.Now()
	for _, m := range ms {
		l.Delivered(Delivery{Body: string(m.Body), ID: m.ID, Epoch: m.LeaseEpoch, CallStart: start, CallEnd: end})
	}
	return ms, err
}

// Ack acks ms in one call through cl and books each outcome; it returns
// each message's error (nil: confirmed).
func (l *Ledger) Ack(ctx context.Context, cl *client.Client, ms []*client.Message) []error {
	if len(ms) == 0 {
		return nil
	}
	receipts := make([]string, len(ms))
	for i, m := range ms {
		receipts[i] = m.Receipt
	}
	err := cl.AckBatch(ctx, receipts)
	var be *client.BatchError
	perItem := errors.As(err, &be)
	out := make([]error, len(ms))
	for i, m := range ms {
		switch {
		case perItem && i < len(be.Errs):
			out[i] = be.Errs[i]
		case err != nil && !perItem:
			out[i] = err
		}
		l.Acked(m.ID, m.LeaseEpoch, out[i])
	}
	return out
}

// Clear reports whether an ack's error is one a consumer can act on: the
// lease is gone (ErrStaleReceipt: the message comes back), or the outcome
// is unknown (ErrUnavailable, a deadline: it may come back). Anything else
// (invalid, not found, an internal error) is not a clear answer.
func Clear(err error) bool {
	return err == nil || errors.Is(err, client.ErrStaleReceipt) || errors.Is(err, client.ErrUnavailable) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// Consume receives once and acks everything received; it returns how many
// messages came and the ack errors that were not Clear.
func (l *Ledger) Consume(ctx context.Context, cl *client.Client, queue string, o client.ReceiveOptions) (int, []error, error) {
	ms, err := l.Receive(ctx, cl, queue, o)
	if err != nil && len(ms) == 0 {
		return 0, nil, err
	}
	var unclear []error
	for i, aerr := range l.Ack(ctx, cl, ms) {
		if !Clear(aerr) {
			unclear = append(unclear, fmt.Errorf("ack of %s: %w", ms[i].ID, aerr))
		}
	}
	return len(ms), unclear, nil
}

// Drain consumes queue through cl until the history is finished: every
// acknowledged send delivered, every delivered message settled (its ack
// confirmed, or, when an ack's outcome was unknown, its state read back as
// acked), and settle has passed since the last lease the ledger saw could
// have ended, so a message whose ack was confirmed but not kept would have
// come back. settle covers what a leader change adds to a lease (the
// grace of docs/fsm.md, "LeaderGrace"). Receive errors are retried until
// ctx ends; ack errors that are not Clear are returned at the end.
func (l *Ledger) Drain(ctx context.Context, cl *client.Client, queue string, settle time.Duration) error {
	var unclear []error
	for {
		n, bad, err := l.Consume(ctx, cl, queue, client.ReceiveOptions{Max: 100, Wait: time.Second})
		unclear = append(unclear, bad...)
		if err != nil {
			if ctx.Err() != nil {
				return l.unfinished(ctx.Err())
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if n > 0 {
			continue
		}
		for _, id := range l.failedAcks(50) {
			// An ack whose answer was lost may have been applied.
			if info, err := cl.GetMessage(ctx, id); err == nil && info.State == "acked" {
				l.Settled(id)
			}
		}
		undelivered, unsettled := l.Pending()
		if len(undelivered) == 0 && len(unsettled) == 0 && time.Now().After(l.LeaseEnd().Add(settle)) {
			return errors.Join(unclear...)
		}
		if ctx.Err() != nil {
			return l.unfinished(ctx.Err())
		}
	}
}

func (l *Ledger) unfinished(cause error) error {
	undelivered, unsettled := l.Pending()
	return fmt.Errorf("drain unfinished (%w): %d acknowledged sends never delivered %v, %d messages never settled %v",
		cause, len(undelivered), undelivered[:min(len(undelivered), 5)], len(unsettled), unsettled[:min(len(unsettled), 5)])
}
