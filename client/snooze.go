package client

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"

	"github.com/raftq/raftq/api/raftqv1"
)

// SnoozeOptions shape a snooze. The zero value hands the message back
// ready at once, with no reason recorded.
type SnoozeOptions struct {
	// Delay before the message is ready again, 0 to MaxDelay.
	Delay time.Duration
	// Reason is recorded in the attempt's history entry (not as the
	// message's last error), at most MaxSnoozeReason bytes.
	Reason string
}

// MaxSnoozeReason caps SnoozeOptions.Reason (the server's limit on error
// texts, fsm/limits.go MaxErrorLen).
const MaxSnoozeReason = 1024

// Snooze hands a leased message back without using up an attempt: it is
// ready again after o.Delay and its receive count drops by the receive its
// lease took, so snoozing never brings it nearer the dead-letter queue (a
// Nack does). Retention still applies. While some replica of the shard runs
// a binary older than log format 7, the shard refuses it with
// FailedPrecondition naming the log format (which, like every
// FailedPrecondition, matches ErrStaleReceipt) and the lease stands.
func (c *Client) Snooze(ctx context.Context, receipt string, o SnoozeOptions) error {
	shard, err := receiptShard(receipt)
	if err != nil {
		return fmt.Errorf("snooze: %w", err)
	}
	switch {
	case o.Delay < 0 || o.Delay > MaxDelay:
		return fmt.Errorf("snooze: %w", invalid(fmt.Sprintf("delay %v outside 0-%v", o.Delay, MaxDelay)))
	case len(o.Reason) > MaxSnoozeReason:
		return fmt.Errorf("snooze: %w", invalid(fmt.Sprintf("reason of %d bytes above the limit %d", len(o.Reason), MaxSnoozeReason)))
	}
	req := &raftqv1.SnoozeRequest{Receipt: receipt, DelayMs: o.Delay.Milliseconds(), Reason: o.Reason}
	err = c.invoke(ctx, callSpec{shard: shard, safe: true}, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) error {
		_, err := raftqv1.NewMessagesClient(cc).Snooze(ctx, req, co...)
		return err
	})
	if err != nil {
		return fmt.Errorf("snooze: %w", err)
	}
	return nil
}
