package client

import (
	"context"
	"fmt"
	"sync"
)

// inflight counts the work the client still owes an answer: calls in
// progress and sends waiting in a coalescing stream. Flush and Drain wait
// for it to reach zero.
type inflight struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed while n == 0
}

func newInflight() *inflight {
	idle := make(chan struct{})
	close(idle)
	return &inflight{idle: idle}
}

func (f *inflight) add() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		f.idle = make(chan struct{})
	}
	f.n++
}

func (f *inflight) done() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n--
	if f.n == 0 {
		close(f.idle)
	}
}

// wait returns nil once nothing is in flight, or an error naming how much
// still is when ctx ends first.
func (f *inflight) wait(ctx context.Context) error {
	f.mu.Lock()
	idle := f.idle
	f.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		f.mu.Lock()
		n := f.n
		f.mu.Unlock()
		return fmt.Errorf("%d call(s) and send(s) still in flight: %w", n, ctx.Err())
	}
}

// Flush waits until every call and send in progress, SendAsync's
// included, has its outcome, or ctx ends. Work started while it waits
// makes it wait longer. It does not stop new work: Drain does.
func (c *Client) Flush(ctx context.Context) error {
	if err := c.inflight.wait(ctx); err != nil {
		return fmt.Errorf("raftq flush: %w", err)
	}
	return nil
}

// Drain stops the client gracefully: new calls fail at once with ErrClosed
// (and ErrNotSent), calls and sends in progress (SendAsync's too) get their
// outcomes, then the client closes. If ctx ends first it closes anyway:
// what was still in flight then fails with ErrOutcomeUnknown (it may have
// taken effect) or, if it never left the client, ErrNotSent. Stop a worker
// running on the client before draining it: its acks would be refused.
func (c *Client) Drain(ctx context.Context) error {
	c.mu.Lock()
	c.draining = true
	c.mu.Unlock()
	werr := c.inflight.wait(ctx)
	cerr := c.Close()
	if werr != nil {
		return fmt.Errorf("raftq drain: closed with work unfinished: %w", werr)
	}
	return cerr
}

// admit refuses new work once Drain or Close began.
func (c *Client) admit() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.draining {
		return closedNotSent()
	}
	return nil
}

func closedNotSent() error { return fmt.Errorf("raftq: %w: %w", ErrClosed, ErrNotSent) }

// closedInFlight is the error of a call that was out when the client
// closed.
func closedInFlight() error {
	return fmt.Errorf("raftq: %w: %w while the call was in flight", ErrOutcomeUnknown, ErrClosed)
}
