// Package liveness tells a silent gRPC peer from a slow one. A call that
// has been outstanding for a while, on a connection over which nothing has
// come back for as long, gets its peer probed with a gRPC health check on
// the same connection. The peer's gRPC server answers the probe whatever
// the call is waiting for (a raft round, a long poll), so an answer means
// "slow, keep waiting" and silence means the path is dead one way or the
// other: the call is cancelled, and no new call is sent to that peer until
// a probe is answered again.
//
// gRPC keepalive cannot do this within a second: grpc-go raises a client's
// ping interval to at least 10 s, and an outstanding call keeps nothing
// from waiting for its whole deadline. The nodes' forwarding (router/) and
// the Go client (client/) both use it.
package liveness

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// ErrSilent means the peer did not answer a probe in time and nothing has
// been heard from it since.
var ErrSilent = errors.New("peer stopped answering")

// ErrUnreachable means the connection to the peer is not up: idle and
// failing to connect, or in TRANSIENT_FAILURE.
var ErrUnreachable = errors.New("peer not connected")

// Config times the probes. The zero value turns probing off.
type Config struct {
	// After is how long a call waits, with nothing heard from its peer in
	// as long, before the peer is probed.
	After time.Duration
	// Timeout bounds a probe, and how long Ready waits for a connection
	// to come up. While a call lasts, its peer is checked again every
	// Timeout: a long poll parked on an idle connection costs one probe a
	// second, not four.
	Timeout time.Duration
}

// Peer watches one connection. It is safe for concurrent use.
type Peer struct {
	cc  *grpc.ClientConn
	cfg Config

	heard    atomic.Int64 // unix nanos of the last sign of life
	isSilent atomic.Bool  // silent != nil, readable without the lock

	mu       sync.Mutex
	silent   error         // non-nil while the last probe went unanswered
	probing  chan struct{} // closed when the probe in flight ends
	probedAt time.Time     // start of the last probe
}

// New watches cc. A Config with After or Timeout zero makes Guard a no-op
// and Ready always true.
func New(cc *grpc.ClientConn, cfg Config) *Peer {
	if cfg.After <= 0 || cfg.Timeout <= 0 {
		cfg = Config{}
	}
	return &Peer{cc: cc, cfg: cfg}
}

// Heard records a sign of life: an answer from the peer (a result, or a
// status the peer itself returned). It ends a silence.
func (p *Peer) Heard() {
	p.heard.Store(time.Now().UnixNano())
	if p.isSilent.Load() {
		p.mu.Lock()
		p.setSilentLocked(nil)
		p.mu.Unlock()
	}
}

func (p *Peer) setSilentLocked(err error) {
	p.silent = err
	p.isSilent.Store(err != nil)
}

// Silent reports whether the peer is marked silent: its last probe went
// unanswered and nothing has been heard since.
func (p *Peer) Silent() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.silent != nil
}

// Ready returns nil when a call may be sent: the connection is up (an idle
// one is connected first, for at most Timeout) and the peer is not silent.
// An error (wrapping ErrSilent or ErrUnreachable, or ctx's) means nothing
// was sent. While calls keep coming for a silent peer, Ready probes it
// back to back in the background and refuses them at once; a silence no
// probe has confirmed for 2 Timeouts (nobody called in between) is probed
// again before the answer, for at most Timeout, so the first call after a
// quiet spell is not refused on old news.
func (p *Peer) Ready(ctx context.Context) error {
	if p.cfg.Timeout <= 0 {
		return nil
	}
	if p.isSilent.Load() {
		if err := p.stillSilent(ctx); err != nil {
			return err
		}
	}
	if p.cc.GetState() == connectivity.Ready {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	for {
		s := p.cc.GetState()
		switch s {
		case connectivity.Ready:
			return nil
		case connectivity.Idle:
			p.cc.Connect()
		case connectivity.TransientFailure:
			return fmt.Errorf("%w: %s: connection failing", ErrUnreachable, p.cc.Target())
		case connectivity.Shutdown:
			return fmt.Errorf("%w: %s: connection closed", ErrUnreachable, p.cc.Target())
		}
		if !p.cc.WaitForStateChange(wctx, s) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("%w: %s: not connected within %v (%s)", ErrUnreachable, p.cc.Target(), p.cfg.Timeout, s)
		}
	}
}

// stillSilent returns the peer's silence, or nil once a probe was
// answered; see Ready.
func (p *Peer) stillSilent(ctx context.Context) error {
	p.mu.Lock()
	if p.silent == nil {
		p.mu.Unlock()
		return nil
	}
	stale := time.Since(p.probedAt) >= 2*p.cfg.Timeout
	ch := p.probing
	if ch == nil && (stale || time.Since(p.probedAt) >= p.cfg.After) {
		ch = p.startProbeLocked()
	}
	err := p.silent
	p.mu.Unlock()
	if !stale {
		return err
	}
	select {
	case <-ch:
	case <-ctx.Done():
		return ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.silent
}

// Guard returns the context for one call to the peer and a stop function
// to call when the call returns. The context is cancelled if the peer
// falls silent while the call is outstanding; stop then returns why
// (wrapping ErrSilent), else nil. A call that ends within After costs a
// timer and nothing else.
func (p *Peer) Guard(ctx context.Context) (context.Context, func() error) {
	if p.cfg.After <= 0 {
		return ctx, func() error { return nil }
	}
	gctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	t := time.AfterFunc(p.cfg.After, func() { p.watch(gctx, done, cancel) })
	return gctx, func() error {
		t.Stop()
		close(done)
		cause := context.Cause(gctx)
		cancel(nil)
		if errors.Is(cause, ErrSilent) {
			return cause
		}
		return nil
	}
}

// watch checks on the peer now and then every Timeout until the call
// ends, and cancels it when the peer is silent.
func (p *Peer) watch(ctx context.Context, done <-chan struct{}, cancel context.CancelCauseFunc) {
	for {
		if err := p.check(ctx, done); err != nil {
			cancel(err)
			return
		}
		t := time.NewTimer(p.cfg.Timeout)
		select {
		case <-done:
			t.Stop()
			return
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// check returns nil if the peer was heard from within After, else the
// outcome of a probe (one at a time per peer; callers share it). It
// returns nil if the call ends first.
func (p *Peer) check(ctx context.Context, done <-chan struct{}) error {
	if time.Since(time.Unix(0, p.heard.Load())) < p.cfg.After {
		return nil
	}
	p.mu.Lock()
	ch := p.probing
	if ch == nil {
		ch = p.startProbeLocked()
	}
	p.mu.Unlock()
	select {
	case <-ch:
	case <-done:
		return nil
	case <-ctx.Done():
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.silent
}

// startProbeLocked starts a probe; p.mu is held.
func (p *Peer) startProbeLocked() chan struct{} {
	ch := make(chan struct{})
	p.probing = ch
	p.probedAt = time.Now()
	go p.probe(ch)
	return ch
}

// probe sends one health check. Its context is its own, not a caller's:
// the answer serves every call waiting on this peer.
func (p *Peer) probe(ch chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.Timeout)
	defer cancel()
	start := time.Now()
	_, err := healthpb.NewHealthClient(p.cc).Check(ctx, &healthpb.HealthCheckRequest{})
	p.mu.Lock()
	defer p.mu.Unlock()
	if answered(err) {
		p.heard.Store(time.Now().UnixNano())
		p.setSilentLocked(nil)
	} else {
		p.setSilentLocked(fmt.Errorf("%w: %s: no answer to a health check within %v: %v", ErrSilent, p.cc.Target(), time.Since(start).Round(time.Millisecond), status.Convert(err).Message()))
	}
	p.probing = nil
	close(ch)
}

// answered reports whether a probe's result came from the peer. Any status
// the peer's server returned counts, Unimplemented from a server without a
// health service included; the codes a client produces itself when no
// answer came (its own deadline, a broken or failing connection) do not.
func answered(err error) bool {
	switch status.Code(err) {
	case codes.DeadlineExceeded, codes.Unavailable, codes.Canceled:
		return false
	}
	return true
}
