// Package worker runs handlers over a raftq queue: it long-polls for
// messages, runs up to Concurrency handlers at once, keeps each lease alive
// with heartbeats while its handler runs, and settles every message by the
// handler's result:
//
//	nil                      ack
//	worker.Retry(d, err)     nack, ready again after d
//	worker.Poison(err)       dead-letter at once (also ErrPoison)
//	worker.Snooze(d)         hand back, ready after d, using up no attempt
//	any other error          nack with the error text: the queue's backoff
//	panic                    recovered; nack with the panic text and stack head
//
// If an extension finds the lease gone (ErrStaleReceipt), the handler's
// context is cancelled with cause ErrLeaseLost and its result is dropped:
// the message belongs to another delivery now. Handlers must therefore be
// idempotent (at-least-once), and can use Message.LeaseEpoch as a fencing
// token on their own writes.
//
// A handler's error goes to Options.OnError and a panic to Options.OnPanic,
// or else to the log (slog.Default() unless Options.Logger is set), and
// Hooks.Settled is told each outcome with the error.
//
// Options.Timeout (or TimeoutFor) bounds each job: at the deadline the
// handler's context is cancelled with cause ErrTimeout and the job is
// nacked "timeout", and its lease is never kept past the deadline plus
// TimeoutGrace. Options.Breaker opens a circuit per message type after
// consecutive failures, handing that type's jobs back unrun until a probe
// succeeds (docs/jobs.md). Use adds middleware
// around every handler; Message.ExtendLease asks for a longer lease that
// the heartbeats keep.
package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/raftq/raftq/client"
)

// Message is a delivery handed to a handler. LeaseEpoch grows with every
// lease of the shard, so a write fenced on it rejects a stale holder.
type Message struct {
	client.Message
	j *job // nil for a Message not delivered by a running worker
}

// Handler processes one message. ctx ends when the lease is lost, the
// job's timeout passes (cause ErrTimeout) or the worker's drain timeout
// passes.
type Handler func(ctx context.Context, m *Message) error

// Middleware wraps a handler: logging, tracing, metrics, timeouts. It
// sees every message and the handler's result (a panic inside it is
// recovered like a handler's).
type Middleware func(next Handler) Handler

// Worker consumes one queue. Create it with New, register handlers, then
// call Run once.
type Worker struct {
	c     *client.Client
	queue string
	opts  Options

	mu       sync.RWMutex
	handlers map[string]Handler
	fallback Handler
	mw       []Middleware
	running  bool

	brk *breakers
	met *workerMetrics // nil without Options.Metrics (metrics.go)
}

// New returns a worker for queue. Invalid options are refused here, with
// an error matching client.ErrInvalid.
func New(c *client.Client, queue string, opts Options) (*Worker, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("worker for %q: %w", queue, err)
	}
	w := &Worker{c: c, queue: queue, opts: o, handlers: map[string]Handler{},
		brk: newBreakers(o.Breaker, o.Hooks.BreakerChanged)}
	if o.Metrics != nil {
		if w.met, err = newWorkerMetrics(o.Metrics); err != nil {
			return nil, fmt.Errorf("worker for %q: %w", queue, err)
		}
	}
	return w, nil
}

// Breakers returns the state of every message type whose circuit is not
// closed (Options.Breaker); types missing from it run normally.
func (w *Worker) Breakers() map[string]BreakerState {
	return w.brk.states()
}

// Use adds middleware around every handler, the first given outermost.
// Call it before Run.
func (w *Worker) Use(mw ...Middleware) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.mw = append(w.mw, mw...)
}

// Register sets the handler for messages of msgType (Message.Type).
func (w *Worker) Register(msgType string, h Handler) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.handlers[msgType] = h
}

// Default sets the handler for messages whose type has no handler.
func (w *Worker) Default(h Handler) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fallback = h
}

// handler is the handler for msgType wrapped in the middleware.
func (w *Worker) handler(msgType string) Handler {
	w.mu.RLock()
	defer w.mu.RUnlock()
	h, ok := w.handlers[msgType]
	if !ok {
		h = w.fallback
	}
	if h == nil {
		h = func(context.Context, *Message) error {
			return fmt.Errorf("no handler registered for message type %q", msgType)
		}
	}
	for i := len(w.mw) - 1; i >= 0; i-- {
		h = w.mw[i](h)
	}
	return h
}

// Run receives and handles messages until ctx ends, then shuts down
// gracefully: it stops receiving, lets in-flight handlers finish within
// DrainTimeout, then cancels the rest and releases their messages for
// immediate redelivery without using up an attempt (client.Snooze). It returns nil after a shutdown by ctx, or an error
// (after draining) if the queue does not exist or the client was closed
// under it (client.ErrClosed: close the client after Run returns).
//
// A long poll cut short by shutdown may have leased messages the worker never
// saw; they become visible again when their lease (Visibility) expires.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.running {
		w.mu.Unlock()
		return fmt.Errorf("worker for %q: Run called twice", w.queue)
	}
	w.running = true
	w.mu.Unlock()

	r := newRun(ctx, w)
	runErr := r.receiveLoop(ctx)
	r.drain()
	return runErr
}

// sleepCtx sleeps d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// fatalReceive reports receive errors that retrying cannot fix: a missing
// queue, bad options, a closed client (retrying that would spin forever
// while the leases of running handlers could be neither kept nor settled).
func fatalReceive(err error) bool {
	return errors.Is(err, client.ErrNotFound) || errors.Is(err, client.ErrInvalid) || errors.Is(err, client.ErrClosed)
}
