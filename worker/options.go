package worker

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/raftq/raftq/client"
)

// DefaultConcurrency is Options.Concurrency when it is 0: enough handlers
// in flight that a worker of I/O-bound handlers is not held to one round
// trip per message (docs/client.md, "Concurrency").
const DefaultConcurrency = 64

// Options configure a Worker. Zero fields take the defaults noted.
type Options struct {
	// Concurrency is the most handlers running at once (default
	// DefaultConcurrency). The worker never holds more leases than this.
	Concurrency int
	// Visibility is the lease length asked for on receive and on every
	// extension (default 30 s, at most client.MaxVisibility).
	Visibility time.Duration
	// Wait is the long-poll wait of each receive (default and most
	// client.MaxWait, 20 s).
	Wait time.Duration
	// Batch is the most messages taken per receive (default Concurrency,
	// at most 1000); a receive never asks for more than the free slots.
	Batch int
	// DrainTimeout is how long Run lets in-flight handlers finish after its
	// context ends (default 30 s). Handlers still running then are cancelled
	// and their messages released for immediate redelivery, using up no
	// attempt.
	DrainTimeout time.Duration
	// ExtendEvery is the heartbeat period of lease extensions (default
	// Visibility/3, so two extensions can fail before a lease is lost).
	ExtendEvery time.Duration
	// SettleTimeout bounds each ack, nack or dead-letter call (default 10 s).
	SettleTimeout time.Duration
	// Timeout is each job's execution timeout (default 0: none). At the
	// deadline the handler's context is cancelled with cause ErrTimeout
	// and the job is nacked with an error text beginning "timeout"; the
	// heartbeats never keep the lease past the deadline plus TimeoutGrace.
	Timeout time.Duration
	// TimeoutFor, if set, gives a job's timeout instead of Timeout (from
	// its type or attributes, say); 0 or less means none for that job.
	TimeoutFor func(m *Message) time.Duration
	// TimeoutGrace is how long past a job's deadline its lease is kept so
	// the handler can return and the timeout nack land (default 2 s). A
	// handler that has not returned by half of it is nacked anyway; it
	// keeps its concurrency slot until it returns.
	TimeoutGrace time.Duration
	// Breaker, if Failures is set, trips a circuit per message type after
	// that many consecutive failures (docs/jobs.md).
	Breaker BreakerOptions
	// Consumer names this worker in message histories (default host:pid).
	Consumer string
	// Logger receives receive errors, settle failures, lost leases, and
	// handler errors and panics unless OnError and OnPanic take them
	// (default slog.Default()).
	Logger *slog.Logger
	// OnError, if set, is called with a handler's error (its returned
	// value, Retry and Poison ones too) before the message is settled;
	// without it the error is logged at warn. ctx is the handler's.
	OnError func(ctx context.Context, m *Message, err error)
	// OnPanic, if set, is called with the value of a handler's panic and
	// the stack where it happened, before the message is nacked; without it
	// the panic is logged at error with its stack.
	OnPanic func(ctx context.Context, m *Message, value any, stack []byte)
	// Hooks are optional metrics callbacks.
	Hooks Hooks
	// Tracing, with a Provider, runs each handler under a span that
	// continues its message's trace (tracing.go); off by default.
	Tracing Tracing
	// Metrics, if set, is where the worker registers its Prometheus
	// metrics (raftq_worker_*, docs/metrics.md); nil registers none. The
	// worker never uses the global registry. Workers of one process may
	// share a registry: they share the metrics, labelled by queue.
	Metrics prometheus.Registerer
}

// Outcome is how the worker settled a message.
type Outcome string

// Outcomes reported to Hooks.Settled.
const (
	Acked        Outcome = "acked"
	Nacked       Outcome = "nacked"        // handler error: queue backoff
	Panicked     Outcome = "panicked"      // handler panic: nacked like an error, with the panic and stack head as its text
	Retried      Outcome = "retried"       // worker.Retry: explicit delay
	DeadLettered Outcome = "dead_lettered" // worker.Poison / ErrPoison
	Released     Outcome = "released"      // shutdown: handed back with no delay, no attempt used
	TimedOut     Outcome = "timed_out"     // ran past its timeout: nacked "timeout"
	Snoozed      Outcome = "snoozed"       // worker.Snooze: handed back after a delay, no attempt used
	CircuitOpen  Outcome = "circuit_open"  // its type's circuit is open: handed back unrun, no attempt used
	LeaseLost    Outcome = "lease_lost"    // an extension found the lease gone
	SettleFailed Outcome = "settle_failed" // the settle call itself failed
)

// Settlement is what happened to one message, as Hooks.Settled sees it.
type Settlement struct {
	Outcome Outcome
	// Took is how long the handler ran (0 for a message released at
	// shutdown whose handler had not returned).
	Took time.Duration
	// Err is the handler's error: what it returned, a *PanicError for a
	// panic, ErrShutdown for a released message; nil when it succeeded.
	Err error
	// SettleErr says why the message could not be settled as the handler
	// asked: the failed call for SettleFailed, the extension that found
	// the lease gone for LeaseLost; else nil.
	SettleErr error
}

// Hooks are called from worker goroutines; they must be cheap and safe for
// concurrent use.
type Hooks struct {
	// Received is called after each receive with the number of messages.
	Received func(n int)
	// Settled is called once per message when it is settled.
	Settled func(m *Message, s Settlement)
	// BreakerChanged is called when the circuit of a message type moves
	// from one state to another (closed, open, half_open).
	BreakerChanged func(msgType string, from, to BreakerState)
}

// withDefaults fills the zero fields and checks the rest; errors match
// client.ErrInvalid.
func (o Options) withDefaults() (Options, error) {
	if o.Concurrency == 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.Visibility == 0 {
		o.Visibility = 30 * time.Second
	}
	if o.Wait == 0 {
		o.Wait = client.MaxWait
	}
	if o.Batch == 0 {
		o.Batch = min(o.Concurrency, 1000)
	}
	if o.DrainTimeout == 0 {
		o.DrainTimeout = 30 * time.Second
	}
	if o.ExtendEvery == 0 {
		o.ExtendEvery = o.Visibility / 3
	}
	if o.SettleTimeout == 0 {
		o.SettleTimeout = 10 * time.Second
	}
	if o.TimeoutGrace == 0 {
		o.TimeoutGrace = 2 * time.Second
	}
	if o.Breaker.Failures > 0 && o.Breaker.CoolDown == 0 {
		o.Breaker.CoolDown = 30 * time.Second
	}
	if o.Consumer == "" {
		host, _ := os.Hostname()
		o.Consumer = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	var err error
	switch {
	case o.Concurrency < 0:
		err = fmt.Errorf("concurrency %d is negative", o.Concurrency)
	case o.Batch < 1 || o.Batch > 1000:
		err = fmt.Errorf("batch %d outside 1-1000", o.Batch)
	case o.Visibility < time.Millisecond || o.Visibility > client.MaxVisibility:
		err = fmt.Errorf("visibility %v outside 1ms-%v", o.Visibility, client.MaxVisibility)
	case o.Wait < 0 || o.Wait > client.MaxWait:
		err = fmt.Errorf("wait %v outside 0-%v", o.Wait, client.MaxWait)
	case o.ExtendEvery <= 0 || o.ExtendEvery >= o.Visibility:
		err = fmt.Errorf("extend period %v must be positive and below visibility %v", o.ExtendEvery, o.Visibility)
	case o.DrainTimeout < 0 || o.SettleTimeout < 0:
		err = fmt.Errorf("negative drain or settle timeout")
	case o.Timeout < 0 || o.TimeoutGrace < 0:
		err = fmt.Errorf("negative timeout %v or timeout grace %v", o.Timeout, o.TimeoutGrace)
	case o.Breaker.Failures < 0:
		err = fmt.Errorf("breaker failures %d is negative", o.Breaker.Failures)
	case o.Breaker.CoolDown < 0 || o.Breaker.CoolDown > client.MaxDelay:
		err = fmt.Errorf("breaker cool-down %v outside 0-%v", o.Breaker.CoolDown, client.MaxDelay)
	}
	if err != nil {
		return o, fmt.Errorf("%w: %w", client.ErrInvalid, err)
	}
	return o, nil
}
