package worker

import (
	"fmt"
	"log/slog"
	"os"
	"time"
)

// Options configure a Worker. Zero fields take the defaults noted.
type Options struct {
	// Concurrency is the most handlers running at once (default 1). The
	// worker never holds more leases than this.
	Concurrency int
	// Visibility is the lease length asked for on receive and on every
	// extension (default 30 s).
	Visibility time.Duration
	// Wait is the long-poll wait of each receive (default 20 s, the maximum).
	Wait time.Duration
	// Batch is the most messages taken per receive (default Concurrency,
	// at most 1000); a receive never asks for more than the free slots.
	Batch int
	// DrainTimeout is how long Run lets in-flight handlers finish after its
	// context ends (default 30 s). Handlers still running then are cancelled
	// and their messages released for immediate redelivery.
	DrainTimeout time.Duration
	// ExtendEvery is the heartbeat period of lease extensions (default
	// Visibility/3, so two extensions can fail before a lease is lost).
	ExtendEvery time.Duration
	// SettleTimeout bounds each ack, nack or dead-letter call (default 10 s).
	SettleTimeout time.Duration
	// Consumer names this worker in message histories (default host:pid).
	Consumer string
	// Logger receives receive errors, settle failures and lost leases.
	Logger *slog.Logger
	// Hooks are optional metrics callbacks.
	Hooks Hooks
}

// Outcome is how the worker settled a message.
type Outcome string

// Outcomes reported to Hooks.Settled.
const (
	Acked        Outcome = "acked"
	Nacked       Outcome = "nacked"        // handler error or panic: queue backoff
	Retried      Outcome = "retried"       // worker.Retry: explicit delay
	DeadLettered Outcome = "dead_lettered" // worker.Poison / ErrPoison
	Released     Outcome = "released"      // shutdown: handed back with no delay
	LeaseLost    Outcome = "lease_lost"    // an extension found the lease gone
	SettleFailed Outcome = "settle_failed" // the settle call itself failed
)

// Hooks are called from worker goroutines; they must be cheap and safe for
// concurrent use.
type Hooks struct {
	// Received is called after each receive with the number of messages.
	Received func(n int)
	// Settled is called once per message with its outcome and handler time.
	Settled func(m *Message, o Outcome, took time.Duration)
}

func (o Options) withDefaults() (Options, error) {
	if o.Concurrency == 0 {
		o.Concurrency = 1
	}
	if o.Visibility == 0 {
		o.Visibility = 30 * time.Second
	}
	if o.Wait == 0 {
		o.Wait = 20 * time.Second
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
	if o.Consumer == "" {
		host, _ := os.Hostname()
		o.Consumer = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case o.Concurrency < 0:
		return o, fmt.Errorf("concurrency %d is negative", o.Concurrency)
	case o.Batch < 1 || o.Batch > 1000:
		return o, fmt.Errorf("batch %d outside 1-1000", o.Batch)
	case o.Visibility < time.Millisecond:
		return o, fmt.Errorf("visibility %v too short", o.Visibility)
	case o.Wait < 0 || o.Wait > 20*time.Second:
		return o, fmt.Errorf("wait %v outside 0-20s", o.Wait)
	case o.ExtendEvery <= 0 || o.ExtendEvery >= o.Visibility:
		return o, fmt.Errorf("extend period %v must be positive and below visibility %v", o.ExtendEvery, o.Visibility)
	case o.DrainTimeout < 0 || o.SettleTimeout < 0:
		return o, fmt.Errorf("negative drain or settle timeout")
	}
	return o, nil
}
