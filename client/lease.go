package client

import (
	"context"
	"fmt"
	"sync"
	"time"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/wire"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
)

// Bounds of the public API, checked here before a call is made (the
// server checks them too).
const (
	// MaxWait caps a receive's long poll.
	MaxWait = 20 * time.Second
	// MaxVisibility caps a lease: a receive's or queue's visibility and an
	// extension.
	MaxVisibility = 12 * time.Hour
	// MaxDelay caps a message's delay (and how far its RunAt may lie ahead),
	// a nack's delay and a queue's default delay and backoff.
	MaxDelay = 365 * 24 * time.Hour
	// MaxRetention caps a queue's retention, dedup window and completed
	// retention.
	MaxRetention = 14 * 24 * time.Hour
	// MaxDeadRetention caps a queue's dead retention.
	MaxDeadRetention = 365 * 24 * time.Hour
	// MaxReceives caps a queue's max receive count.
	MaxReceives = 1000
	// MaxBodyBytes caps a message body (and a queue's MaxMessageBytes).
	MaxBodyBytes = 256 << 10
	// MaxRequestBytes caps one request to a node's client port, encoded:
	// a SendBatch of more must be split.
	MaxRequestBytes = wire.MaxRequestBytes
)

// ReceiveOptions shape a receive.
type ReceiveOptions struct {
	Max        int           // messages to take, 1-1000; 0 means 1
	Wait       time.Duration // long poll up to MaxWait (20 s); 0 returns at once
	Visibility time.Duration // lease length, up to MaxVisibility; 0: the queue's default
	Consumer   string        // recorded in the message history
}

// Receive leases up to Max ready messages of queue from any node, which
// gathers over the queue's shards. With Wait it blocks until a message is
// ready or Wait passes, and then may return none.
//
// Receive is retried after ambiguous failures: messages a lost answer leased
// stay invisible until their lease expires, then are delivered again
// (at-least-once).
func (c *Client) Receive(ctx context.Context, queue string, o ReceiveOptions) ([]*Message, error) {
	r, err := c.ReceiveTimed(ctx, queue, o)
	if err != nil {
		return nil, err
	}
	return r.Messages, nil
}

// Received is one receive's answer with the server's timing.
type Received struct {
	Messages []*Message
	// Waited is how long the server held the call before it found a
	// message ready (the long poll); the rest of the call was the claim
	// and the trip. It tells an idle consumer from a slow lease: a
	// consumer whose receives mostly wait has more capacity than work.
	// With no messages it is the whole call.
	Waited time.Duration
}

// ReceiveTimed is Receive that also reports how long the server waited
// for a ready message (see Received).
func (c *Client) ReceiveTimed(ctx context.Context, queue string, o ReceiveOptions) (out *Received, err error) {
	if t := c.cfg.tracing; t != nil {
		var span trace.Span
		ctx, span = t.startReceive(ctx, queue)
		defer func() {
			var msgs []*Message
			if out != nil {
				msgs = out.Messages
			}
			t.endReceive(span, msgs, err)
		}()
	}
	switch {
	case o.Max < 0 || o.Max > 1000:
		return nil, fmt.Errorf("receive from %q: %w", queue, invalid(fmt.Sprintf("max %d outside 1-1000", o.Max)))
	case o.Wait < 0 || o.Wait > MaxWait:
		return nil, fmt.Errorf("receive from %q: %w", queue, invalid(fmt.Sprintf("wait %v outside 0-%v", o.Wait, MaxWait)))
	case o.Visibility < 0 || o.Visibility > MaxVisibility:
		return nil, fmt.Errorf("receive from %q: %w", queue, invalid(fmt.Sprintf("visibility %v outside 0-%v", o.Visibility, MaxVisibility)))
	}
	req := &raftqv1.ReceiveRequest{
		Queue:               queue,
		MaxMessages:         uint32(max(o.Max, 1)),
		WaitMs:              o.Wait.Milliseconds(),
		VisibilityTimeoutMs: o.Visibility.Milliseconds(),
		Consumer:            o.Consumer,
	}
	var resp *raftqv1.ReceiveResponse
	err = c.invoke(ctx, callSpec{shard: c.receiveShard(), safe: true, extra: o.Wait}, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) (err error) {
		resp, err = raftqv1.NewMessagesClient(cc).Receive(ctx, req, co...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("receive from %q: %w", queue, err)
	}
	out = &Received{Messages: make([]*Message, len(resp.GetMessages())), Waited: time.Duration(resp.GetWaitedUs()) * time.Microsecond}
	for i, m := range resp.GetMessages() {
		out.Messages[i] = messageFrom(m)
	}
	return out, nil
}

// receiveShard picks the shard whose leader takes the next receive, in
// rotation. Any node can serve a receive, but a node's router asks the
// shards it leads first: at a follower, a receive on a shallow queue costs
// a forwarded long poll and a forwarded lease, two more gRPC hops on both
// nodes. The router still sweeps every shard, so the choice moves only
// where the first try is made.
func (c *Client) receiveShard() int {
	n := c.smap.Load().count
	if n == 0 {
		return anyShard
	}
	return int(c.recvRR.Add(1) % uint64(n))
}

// receiptShard parses a receipt for routing.
func receiptShard(receipt string) (int, error) {
	r, err := wire.ParseReceipt(receipt)
	if err != nil {
		return 0, invalid(err.Error())
	}
	return int(r.Shard), nil
}

// Ack acknowledges a leased message: it is done. It returns nil when the
// message is acked, by this call or by an earlier one with the same
// receipt: acks are idempotent, so an ack the client retried after an
// ambiguous failure, whose first attempt committed, reports nil as long as
// the server still keeps the acked record (the queue's completed
// retention, default 1 h). Otherwise: ErrStaleReceipt (the lease was lost:
// the message will be or was delivered again, or another delivery of it
// was acked), ErrNotFound (the message's record is gone, so the outcome
// cannot be confirmed), ErrInvalid (a malformed receipt), or a failed call.
func (c *Client) Ack(ctx context.Context, receipt string) error {
	errs := c.ackAll(ctx, []string{receipt}, nil)
	if errs[0] != nil {
		return fmt.Errorf("ack: %w", errs[0])
	}
	return nil
}

// AckBatch acknowledges many leased messages. Receipts are grouped by
// shard and each group goes to its shard's leader in parallel. It returns
// nil only if every receipt was acked (as Ack reports it); otherwise a
// *BatchError whose Errs[i] is receipt i's error, nil where it was acked.
// A call that failed as a whole gives each of its receipts that error.
func (c *Client) AckBatch(ctx context.Context, receipts []string) error {
	if len(receipts) == 0 {
		return nil
	}
	if err := batchError(c.ackAll(ctx, receipts, nil)); err != nil {
		return fmt.Errorf("ack batch: %w", err)
	}
	return nil
}

// ackAll acks receipts, with results[i] as receipt i's job result when
// results is not nil, and returns one error per receipt.
func (c *Client) ackAll(ctx context.Context, receipts []string, results [][]byte) []error {
	itemErrs := make([]error, len(receipts))
	byShard := map[int][]int{}
	for i, r := range receipts {
		s, err := receiptShard(r)
		if err != nil {
			itemErrs[i] = err
			continue
		}
		byShard[s] = append(byShard[s], i)
	}
	var wg sync.WaitGroup
	for shard, idx := range byShard {
		wg.Go(func() {
			req := &raftqv1.AckRequest{Receipts: make([]string, len(idx))}
			for j, i := range idx {
				req.Receipts[j] = receipts[i]
				if results != nil {
					req.Results = append(req.Results, results[i])
				}
			}
			var resp *raftqv1.AckResponse
			err := c.invoke(ctx, callSpec{shard: shard, safe: true}, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) (err error) {
				resp, err = raftqv1.NewMessagesClient(cc).Ack(ctx, req, co...)
				return err
			})
			if err == nil && len(resp.GetResults()) != len(idx) {
				err = fmt.Errorf("server returned %d results for %d receipts", len(resp.GetResults()), len(idx))
			}
			if err != nil {
				err = fmt.Errorf("ack call to shard %d: %w", shard, err)
				for _, i := range idx {
					itemErrs[i] = err
				}
				return
			}
			for j, i := range idx {
				itemErrs[i] = itemError(resp.GetResults()[j].GetCode(), resp.GetResults()[j].GetError())
			}
		})
	}
	wg.Wait()
	return itemErrs
}

// NackOptions shape a nack. The zero value nacks with the queue's backoff
// policy and no error text.
type NackOptions struct {
	// Delay before the message is ready again, up to MaxDelay. 0: the
	// queue's backoff policy (exponential with full jitter); to make it
	// ready at once, set ReadyNow instead.
	Delay time.Duration
	// ReadyNow makes the message ready again at once, whatever the queue's
	// backoff (Delay must then be 0).
	ReadyNow bool
	// Error is recorded as the message's last error and in its history.
	Error string
}

// Nack gives a leased message back: ready again after the delay, or dead
// when it has reached the queue's max receive count.
func (c *Client) Nack(ctx context.Context, receipt string, o NackOptions) error {
	shard, err := receiptShard(receipt)
	if err != nil {
		return fmt.Errorf("nack: %w", err)
	}
	req := &raftqv1.NackRequest{Receipt: receipt, Error: o.Error}
	switch {
	case o.Delay < 0 || o.Delay > MaxDelay:
		return fmt.Errorf("nack: %w", invalid(fmt.Sprintf("delay %v outside 0-%v", o.Delay, MaxDelay)))
	case o.ReadyNow && o.Delay != 0:
		return fmt.Errorf("nack: %w", invalid(fmt.Sprintf("delay %v with ReadyNow: give one", o.Delay)))
	case o.ReadyNow:
		req.HasDelay = true
	case o.Delay > 0:
		req.HasDelay, req.DelayMs = true, o.Delay.Milliseconds()
	}
	err = c.invoke(ctx, callSpec{shard: shard, safe: true}, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) error {
		_, err := raftqv1.NewMessagesClient(cc).Nack(ctx, req, co...)
		return err
	})
	if err != nil {
		return fmt.Errorf("nack: %w", err)
	}
	return nil
}

// Extend sets the lease to end d from now (by the shard's clock) and returns
// the new deadline. ErrStaleReceipt means the lease is already lost.
func (c *Client) Extend(ctx context.Context, receipt string, d time.Duration) (time.Time, error) {
	shard, err := receiptShard(receipt)
	if err != nil {
		return time.Time{}, fmt.Errorf("extend: %w", err)
	}
	if d <= 0 || d > MaxVisibility {
		return time.Time{}, fmt.Errorf("extend: %w", invalid(fmt.Sprintf("lease length %v outside (0, %v]", d, MaxVisibility)))
	}
	req := &raftqv1.ExtendLeaseRequest{Receipt: receipt, VisibilityTimeoutMs: d.Milliseconds()}
	var resp *raftqv1.ExtendLeaseResponse
	err = c.invoke(ctx, callSpec{shard: shard, safe: true}, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) (err error) {
		resp, err = raftqv1.NewMessagesClient(cc).ExtendLease(ctx, req, co...)
		return err
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("extend: %w", err)
	}
	return unixMs(resp.GetLeaseDeadlineMs()), nil
}

// DeadLetter moves a leased message to the queue's DLQ at once (poison),
// with reason as its last error.
func (c *Client) DeadLetter(ctx context.Context, receipt, reason string) error {
	shard, err := receiptShard(receipt)
	if err != nil {
		return fmt.Errorf("dead-letter: %w", err)
	}
	req := &raftqv1.DeadLetterRequest{Receipt: receipt, Error: reason}
	err = c.invoke(ctx, callSpec{shard: shard, safe: true}, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) error {
		_, err := raftqv1.NewMessagesClient(cc).DeadLetter(ctx, req, co...)
		return err
	})
	if err != nil {
		return fmt.Errorf("dead-letter: %w", err)
	}
	return nil
}

// idShard parses a message id for routing.
func idShard(id string) (int, error) {
	m, err := wire.ParseMessageID(id)
	if err != nil {
		return 0, invalid(err.Error())
	}
	return int(m.Shard), nil
}

// GetMessage returns a message's full record, in any state the shard still
// keeps (acked records stay for the queue's completed retention).
func (c *Client) GetMessage(ctx context.Context, id string) (*MessageInfo, error) {
	shard, err := idShard(id)
	if err != nil {
		return nil, fmt.Errorf("get message: %w", err)
	}
	var resp *raftqv1.MessageInfo
	err = c.invoke(ctx, callSpec{shard: shard, safe: true}, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) (err error) {
		resp, err = raftqv1.NewMessagesClient(cc).GetMessage(ctx, &raftqv1.GetMessageRequest{MessageId: id}, co...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get message %s: %w", id, err)
	}
	return messageInfoFrom(resp), nil
}

// Cancel removes a ready or delayed message. A leased message cannot be
// cancelled (ErrStaleReceipt, which stands for FAILED_PRECONDITION).
func (c *Client) Cancel(ctx context.Context, id string) error {
	shard, err := idShard(id)
	if err != nil {
		return fmt.Errorf("cancel message: %w", err)
	}
	err = c.invoke(ctx, callSpec{shard: shard, safe: true}, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) error {
		_, err := raftqv1.NewMessagesClient(cc).CancelMessage(ctx, &raftqv1.CancelMessageRequest{MessageId: id}, co...)
		return err
	})
	if err != nil {
		return fmt.Errorf("cancel message %s: %w", id, err)
	}
	return nil
}
