package client

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
)

// MaxResultBytes caps one job result (AckWithResult).
const MaxResultBytes = 64 << 10

// waitCall is how long one WaitMessage call asks the server to hold;
// Wait repeats calls until the job finishes or its context ends.
const waitCall = 20 * time.Second

// minWaitLeft is the least time before ctx's deadline for which Wait
// makes another call once it has a state to return.
const minWaitLeft = 100 * time.Millisecond

// AckWithResult acknowledges a leased message as Ack does and keeps
// result, at most MaxResultBytes, on the acked record, where GetMessage and
// Wait return it for the queue's completed retention. A retried ack whose
// first attempt committed keeps the first attempt's result.
func (c *Client) AckWithResult(ctx context.Context, receipt string, result []byte) error {
	if len(result) > MaxResultBytes {
		return fmt.Errorf("ack: %w", invalid(fmt.Sprintf("result of %d bytes above the limit of %d", len(result), MaxResultBytes)))
	}
	errs := c.ackAll(ctx, []string{receipt}, [][]byte{result})
	if errs[0] != nil {
		return fmt.Errorf("ack: %w", errs[0])
	}
	return nil
}

// Finished reports whether the message's job is over: acked (its Result
// holds what the ack carried) or dead.
func (m *MessageInfo) Finished() bool { return m.State == "acked" || m.State == "dead" }

// Wait blocks until the job with message id id, sent to queue, finishes
// (acked or dead) and returns its record with the result, or until ctx
// ends. Each call to the server long-polls for up to 20 s; leader changes
// in between are retried like any call, so a wait holds across failover.
// When ctx ends first, Wait returns the last state it saw (nil if none)
// with ctx's error. ErrNotFound means the record is gone: the id was never sent, the
// message was cancelled, or its acked record outlived the queue's
// completed retention or byte bound. A message of another queue is
// refused with ErrInvalid.
func (c *Client) Wait(ctx context.Context, queue, id string) (*MessageInfo, error) {
	shard, err := idShard(id)
	if err != nil {
		return nil, fmt.Errorf("wait for message %s: %w", id, err)
	}
	var last *MessageInfo
	for {
		wait := waitCall
		if d, ok := ctx.Deadline(); ok && last != nil && time.Until(d) < minWaitLeft {
			// Too little time left for a call to come back: a call made
			// now would end in a deadline error that hides the state.
			return last, fmt.Errorf("wait for message %s (still %s): %w", id, last.State, context.DeadlineExceeded)
		}
		if d, ok := ctx.Deadline(); ok {
			// The server answers a little before ctx ends, so the last
			// state reaches the caller instead of a deadline error.
			wait = max(min(wait, time.Until(d)*9/10-50*time.Millisecond), time.Millisecond)
		}
		req := &raftqv1.WaitMessageRequest{MessageId: id, WaitMs: max(wait.Milliseconds(), 1), Queue: queue}
		var resp *raftqv1.MessageInfo
		err := c.invoke(ctx, callSpec{shard: shard, safe: true, extra: wait}, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) (err error) {
			resp, err = raftqv1.NewMessagesClient(cc).WaitMessage(ctx, req, co...)
			return err
		})
		if err != nil {
			return last, fmt.Errorf("wait for message %s: %w", id, err)
		}
		m := messageInfoFrom(resp)
		if m.Queue != queue {
			return nil, fmt.Errorf("wait for message %s: %w", id, invalid(fmt.Sprintf("the message belongs to queue %q, not %q", m.Queue, queue)))
		}
		if m.Finished() {
			return m, nil
		}
		if err := ctx.Err(); err != nil {
			return m, fmt.Errorf("wait for message %s (still %s): %w", id, m.State, err)
		}
		last = m
	}
}
