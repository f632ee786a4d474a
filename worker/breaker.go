package worker

import (
	"errors"
	"sync"
	"time"
)

// BreakerOptions configure the circuit breaker a worker keeps per message
// type. A worker cannot ask the server for "every type but one", so an open
// circuit does not stop receives: jobs of its type are handed back unrun
// with client.Snooze, which uses up no attempt, to come back after the
// cool-down.
type BreakerOptions struct {
	// Failures is how many consecutive failures of one type open its
	// circuit (0: no breaker). A failure is a handler error, panic, Retry
	// or timeout; a success is a nil result. Poison, Snooze, a lost lease
	// and shutdown say nothing about the type's health and count as
	// neither.
	Failures int
	// CoolDown is how long an open circuit hands its type's jobs back
	// before letting one through as a probe (default 30 s). A probe's
	// success closes the circuit; its failure opens it for another
	// cool-down. Jobs that arrive while the probe runs are handed back for
	// a cool-down too.
	CoolDown time.Duration
}

// BreakerState is the state of one message type's circuit.
type BreakerState string

// Circuit states, as Hooks.BreakerChanged and Worker.Breakers report them.
const (
	BreakerClosed   BreakerState = "closed"    // jobs run
	BreakerOpen     BreakerState = "open"      // jobs handed back until the cool-down ends
	BreakerHalfOpen BreakerState = "half_open" // one probe job runs; the rest are handed back
)

// verdict is what a job's result says about its type's health.
type verdict int

const (
	neutral verdict = iota
	succeeded
	failed
)

// verdictOf is what a handler's result says about its type's health.
func verdictOf(herr error) verdict {
	var snooze *SnoozeError
	switch {
	case herr == nil:
		return succeeded
	case errors.Is(herr, ErrPoison), errors.As(herr, &snooze):
		return neutral
	}
	return failed
}

// breakers holds the circuit of every message type seen failing. Types
// whose circuit is closed with no failures are not kept.
type breakers struct {
	opts    BreakerOptions
	now     func() time.Time
	changed func(msgType string, from, to BreakerState)

	mu       sync.Mutex
	circuits map[string]*circuit
}

type circuit struct {
	state    BreakerState
	failures int       // consecutive, while closed
	until    time.Time // open: when the next probe may run
	probing  bool      // half-open: the probe is running
}

func newBreakers(o BreakerOptions, changed func(string, BreakerState, BreakerState)) *breakers {
	return &breakers{opts: o, now: time.Now, changed: changed, circuits: map[string]*circuit{}}
}

// admit says whether a job of msgType may run now, and whether it runs as
// its circuit's probe; if it may not, wait is how long to hand it back for.
func (b *breakers) admit(msgType string) (run, probe bool, wait time.Duration) {
	if b.opts.Failures <= 0 {
		return true, false, 0
	}
	b.mu.Lock()
	c := b.circuits[msgType]
	if c == nil || c.state == BreakerClosed {
		b.mu.Unlock()
		return true, false, 0
	}
	now := b.now()
	switch {
	case c.state == BreakerOpen && now.Before(c.until):
		b.mu.Unlock()
		return false, false, c.until.Sub(now)
	case c.probing:
		b.mu.Unlock()
		return false, false, b.opts.CoolDown
	}
	from := c.state
	c.state, c.probing = BreakerHalfOpen, true
	b.mu.Unlock()
	if from != BreakerHalfOpen {
		b.tell(msgType, from, BreakerHalfOpen)
	}
	return true, true, 0
}

// done records a finished job's verdict. Only a probe moves a circuit out
// of half-open; results of jobs admitted before their circuit opened do
// not move an open one.
func (b *breakers) done(msgType string, probe bool, v verdict) {
	if b.opts.Failures <= 0 {
		return
	}
	b.mu.Lock()
	c := b.circuits[msgType]
	if c == nil {
		if v != failed {
			b.mu.Unlock()
			return
		}
		c = &circuit{state: BreakerClosed}
		b.circuits[msgType] = c
	}
	from := c.state
	switch {
	case probe:
		// A neutral probe leaves the circuit half-open for the next job
		// to probe.
		c.probing = false
		switch v {
		case succeeded:
			c.state, c.failures = BreakerClosed, 0
		case failed:
			c.state, c.until = BreakerOpen, b.now().Add(b.opts.CoolDown)
		}
	case c.state != BreakerClosed:
	case v == succeeded:
		c.failures = 0
	case v == failed:
		c.failures++
		if c.failures >= b.opts.Failures {
			c.state, c.failures, c.until = BreakerOpen, 0, b.now().Add(b.opts.CoolDown)
		}
	}
	if c.state == BreakerClosed && c.failures == 0 {
		delete(b.circuits, msgType)
	}
	to := c.state
	b.mu.Unlock()
	if from != to {
		b.tell(msgType, from, to)
	}
}

func (b *breakers) tell(msgType string, from, to BreakerState) {
	if b.changed != nil {
		b.changed(msgType, from, to)
	}
}

// states returns the types whose circuit is not closed.
func (b *breakers) states() map[string]BreakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]BreakerState{}
	for t, c := range b.circuits {
		if c.state != BreakerClosed {
			out[t] = c.state
		}
	}
	return out
}
