package client

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc/status"
)

// PendingSend is a Send in flight, from SendAsync.
type PendingSend struct {
	queue string
	ch    <-chan sendOutcome // one outcome, then nothing

	mu  sync.Mutex
	got bool
	out sendOutcome
}

// SendAsync starts a Send and returns without waiting for it, as NATS's
// PublishAsync or a Kafka producer's send do: a producer can keep many
// messages in flight without a goroutine for each. The message leaves with
// the other sends bound for its shard; Wait returns what Send would have.
// ctx bounds the send itself, as for Send: if it ends before the message
// left, nothing was sent; after, the outcome is unknown. Sends in flight
// together may commit in any order, as concurrent Sends may: a producer
// that needs a FIFO group's order waits for each before the group's next.
func (c *Client) SendAsync(ctx context.Context, queue string, body []byte, opts ...SendOption) *PendingSend {
	ps, err := c.prepareSend(ctx, queue, body, opts)
	if err != nil {
		return settled(queue, sendOutcome{err: err})
	}
	if ps.coalesce {
		p, _ := c.queueCoalesced(ctx, ps.key, ps.req)
		return &PendingSend{queue: queue, ch: p.done}
	}
	// A message without a fixed shard, or with gRPC metadata, needs a call
	// of its own.
	ch := make(chan sendOutcome, 1)
	go func() {
		res, err := c.sendAlone(ctx, ps)
		ch <- sendOutcome{res: res, err: err}
	}()
	return &PendingSend{queue: queue, ch: ch}
}

func settled(queue string, o sendOutcome) *PendingSend {
	ch := make(chan sendOutcome, 1)
	ch <- o
	return &PendingSend{queue: queue, ch: ch}
}

// Wait returns the send's outcome once it is known: its id, or its error,
// as Send returns them. If ctx ends first, Wait returns ctx's error and the
// send goes on; Wait may be called again.
func (p *PendingSend) Wait(ctx context.Context) (SendResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.got {
		select {
		case p.out = <-p.ch:
			p.got = true
		case <-ctx.Done():
			return SendResult{}, fmt.Errorf("wait for send to %q: %w", p.queue, fromStatus(status.FromContextError(ctx.Err()).Err()))
		}
	}
	if p.out.err != nil {
		return SendResult{}, fmt.Errorf("send to %q: %w", p.queue, p.out.err)
	}
	return p.out.res, nil
}
