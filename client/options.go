package client

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/raftq/raftq/internal/liveness"
	"google.golang.org/grpc/backoff"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Option configures Dial; the With... functions make them.
type Option interface {
	apply(*config) error
}

// option is an Option made of a function, so the config it changes stays
// unexported.
type option func(*config) error

func (o option) apply(c *config) error { return o(c) }

type config struct {
	creds       credentials.TransportCredentials
	callTimeout time.Duration
	retry       RetryPolicy
	logger      *slog.Logger
	autoDedup   bool
	coalesceMax int // messages per coalesced send call; <= 1: off
	dialOpts    []grpc.DialOption
	probe       liveness.Config
	tracing     *tracing // nil: off (tracing.go)
	sendHold    bool     // keep a node's refusal of a queue's sends (hold.go)
}

func defaultConfig() config {
	return config{
		creds:       insecure.NewCredentials(),
		callTimeout: 10 * time.Second,
		retry:       DefaultRetryPolicy(),
		logger:      slog.New(slog.DiscardHandler),
		autoDedup:   true,
		coalesceMax: defaultCoalesceMax,
		sendHold:    true,
		probe:       liveness.Config{After: defaultProbeAfter, Timeout: defaultProbeTimeout},
	}
}

// The default liveness probe moves a call off a node that stopped
// answering within about a second (see WithLivenessProbe).
const (
	defaultProbeAfter   = 250 * time.Millisecond
	defaultProbeTimeout = time.Second
)

// WithTLS sets the transport credentials (the default is plaintext).
func WithTLS(creds credentials.TransportCredentials) Option {
	return option(func(c *config) error {
		if creds == nil {
			return fmt.Errorf("WithTLS: nil credentials")
		}
		c.creds = creds
		return nil
	})
}

// WithCallTimeout bounds each attempt of a call (default 10 s). A receive's
// long-poll wait is added on top. The caller's context bounds the whole call,
// retries included.
func WithCallTimeout(d time.Duration) Option {
	return option(func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("WithCallTimeout: %v is not positive", d)
		}
		c.callTimeout = d
		return nil
	})
}

// WithRetry sets the retry budget and backoff.
func WithRetry(p RetryPolicy) Option {
	return option(func(c *config) error {
		if err := p.validate(); err != nil {
			return fmt.Errorf("WithRetry: %w", err)
		}
		c.retry = p
		return nil
	})
}

// WithSendHold turns the send hold on or off (default on). On, a node's
// refusal of a queue's sends with a retry time (RESOURCE_EXHAUSTED past a
// quota, a full send queue, a node short of memory or disk) is kept, per
// queue and shard: until that time passes the client answers further
// sends to the queue itself, with the node's message (Error.Held),
// without sending them; after it, while the node takes fewer than half
// the sends made to the queue in the last 250 ms, the client refuses
// that share of them itself, at random. Calls with retries left wait
// either out. Off, every send goes to a node, which refuses it again.
// docs/client.md, "The send hold".
func WithSendHold(on bool) Option {
	return option(func(c *config) error {
		c.sendHold = on
		return nil
	})
}

// WithLogger sets the logger for retries and shard map refreshes (debug level).
func WithLogger(l *slog.Logger) Option {
	return option(func(c *config) error {
		if l == nil {
			return fmt.Errorf("WithLogger: nil logger")
		}
		c.logger = l
		return nil
	})
}

// WithAutoDedup turns automatic dedup keys for sends on or off (default on).
// Off, a send without an explicit dedup key is never retried, because a retry
// after an ambiguous failure could enqueue it twice.
func WithAutoDedup(on bool) Option {
	return option(func(c *config) error {
		c.autoDedup = on
		return nil
	})
}

// WithSendCoalescing sets how many concurrent Send calls bound for one shard
// may leave together as one SendBatch call (default 256; 0 or 1 turns
// coalescing off, so every Send is its own call). Coalescing adds no delay
// to a lone Send; it only groups sends that would otherwise wait for each
// other, and each Send still returns its own result after its message is
// committed. Sends whose shard the client cannot tell (no group and no
// dedup key, with AutoDedup off) are never coalesced.
func WithSendCoalescing(maxMessages int) Option {
	return option(func(c *config) error {
		if maxMessages < 0 {
			return fmt.Errorf("WithSendCoalescing(%d): %w", maxMessages, errCoalesceOff)
		}
		c.coalesceMax = min(maxMessages, maxCoalesceMax)
		return nil
	})
}

// WithLivenessProbe sets how the client tells a node that stopped
// answering from a slow call (defaults 250 ms and 1 s). An attempt that
// has been out for after, on a connection that has carried nothing back
// for as long, gets the node probed with a gRPC health check on the same
// connection (and again every timeout while it lasts), which a live node
// answers whatever the call waits for (a long poll, a raft round). If the
// probe goes unanswered for timeout, the
// attempt ends as UNAVAILABLE with an unknown outcome (retried where that
// is safe), and no attempt is sent to the node until a probe is answered
// again. A connection that is not up within timeout counts as refused:
// nothing was sent. WithLivenessProbe(0, 0) turns all of this off, leaving
// only the per-attempt timeout (WithCallTimeout) to end such an attempt.
func WithLivenessProbe(after, timeout time.Duration) Option {
	return option(func(c *config) error {
		if after < 0 || timeout < 0 || (after == 0) != (timeout == 0) {
			return fmt.Errorf("WithLivenessProbe(%v, %v): both positive, or both 0 for off", after, timeout)
		}
		c.probe = liveness.Config{After: after, Timeout: timeout}
		return nil
	})
}

// WithDialOptions appends raw gRPC dial options (interceptors, keepalive:
// they replace the default keepalive, which pings a connection with calls
// in flight after 10 s of silence and closes it 2 s later).
func WithDialOptions(opts ...grpc.DialOption) Option {
	return option(func(c *config) error {
		c.dialOpts = append(c.dialOpts, opts...)
		return nil
	})
}

// fastConnect bounds one connection attempt; see Client.conn.
func fastConnect() grpc.ConnectParams {
	return grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 3 * time.Second},
		MinConnectTimeout: 2 * time.Second,
	}
}
