package client

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/status"
)

// PendingSend is a Send in flight, from SendAsync.
type PendingSend struct {
	queue string
	ch    <-chan sendOutcome // one outcome, then nothing
	// fin is closed by the Wait that received the outcome, after it set
	// out, so any number of Waits can watch it and their own contexts.
	fin chan struct{}
	out sendOutcome
}

// SendAsync starts a Send and returns without waiting for it, as NATS's
// PublishAsync or a Kafka producer's send do: a producer can keep many
// messages in flight without a goroutine for each. The message leaves with
// the other sends bound for its shard; Wait returns what Send would have.
// ctx bounds the send itself, as for Send: if it ends before the message
// left, nothing was sent and Wait's error wraps ErrNotSent; after, the
// outcome is unknown. SendAsync blocks only to load the shard map when the
// client has none yet (its first send). It does not bound how many sends
// are outstanding: a producer keeps its own window, as the bench does.
// Sends in flight together may commit in any order, as concurrent Sends
// may: a producer that needs a FIFO group's order waits for each before
// the group's next.
func (c *Client) SendAsync(ctx context.Context, queue string, body []byte, opts ...SendOption) *PendingSend {
	var span trace.Span
	if t := c.cfg.tracing; t != nil {
		ctx, span = t.startSend(ctx, queue, 1)
	}
	ps, err := c.prepareSend(ctx, queue, body, opts)
	if err != nil {
		if span != nil {
			endSpan(span, err)
		}
		return settled(queue, sendOutcome{err: err})
	}
	if ps.coalesce {
		p, _ := c.queueCoalesced(ctx, ps.key, ps.req)
		if span != nil {
			return newPending(queue, endOnOutcome(span, p.done))
		}
		return newPending(queue, p.done)
	}
	// A message without a fixed shard, or with gRPC metadata, needs a call
	// of its own.
	ch := make(chan sendOutcome, 1)
	c.inflight.add() // until the goroutine's call is counted itself
	go func() {
		defer c.inflight.done()
		res, err := c.sendAlone(ctx, ps)
		ch <- sendOutcome{res: res, err: err}
	}()
	if span != nil {
		return newPending(queue, endOnOutcome(span, ch))
	}
	return newPending(queue, ch)
}

func newPending(queue string, ch <-chan sendOutcome) *PendingSend {
	return &PendingSend{queue: queue, ch: ch, fin: make(chan struct{})}
}

func settled(queue string, o sendOutcome) *PendingSend {
	ch := make(chan sendOutcome, 1)
	ch <- o
	return newPending(queue, ch)
}

// Wait returns the send's outcome once it is known: its id, or its error,
// as Send returns them. If ctx ends first, Wait returns ctx's error and the
// send goes on; Wait may be called again.
func (p *PendingSend) Wait(ctx context.Context) (SendResult, error) {
	select {
	case o := <-p.ch:
		p.out = o
		close(p.fin)
	case <-p.fin:
	case <-ctx.Done():
		// An answer that is already here wins over the ended wait.
		select {
		case o := <-p.ch:
			p.out = o
			close(p.fin)
		case <-p.fin:
		default:
			return SendResult{}, fmt.Errorf("wait for send to %q: %w", p.queue, fromStatus(status.FromContextError(ctx.Err()).Err()))
		}
	}
	if p.out.err != nil {
		return SendResult{}, fmt.Errorf("send to %q: %w", p.queue, p.out.err)
	}
	return p.out.res, nil
}
