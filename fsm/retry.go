package fsm

import (
	"fmt"

	"github.com/raftq/raftq/fsm/fsmpb"
)

// retryPolicy is a message's own max receive count and nack backoff, set on
// send (NewMessage fields 60-62); a zero field defers to the queue. Most
// messages have none, so msg holds a pointer that is nil for them: eight
// bytes per message instead of twenty.
type retryPolicy struct {
	maxReceives   uint32
	backoffBaseMs int64
	backoffMaxMs  int64
}

func newRetryPolicy(maxReceives uint32, baseMs, maxMs int64) *retryPolicy {
	if maxReceives == 0 && baseMs == 0 && maxMs == 0 {
		return nil
	}
	return &retryPolicy{maxReceives: maxReceives, backoffBaseMs: baseMs, backoffMaxMs: maxMs}
}

// maxReceives is the receive count at which m goes dead.
func (m *msg) maxReceives() uint32 {
	if m.retry != nil && m.retry.maxReceives > 0 {
		return m.retry.maxReceives
	}
	return m.q.policy.GetMaxReceiveCount()
}

// backoffBounds is the base and cap of m's nack backoff. A message that
// sets only its base keeps the queue's cap unless the base is above it, the
// rule NormalizePolicy applies to a queue.
func (m *msg) backoffBounds() (baseMs, maxMs int64) {
	baseMs, maxMs = m.q.policy.GetBackoffBaseMs(), m.q.policy.GetBackoffMaxMs()
	if r := m.retry; r != nil {
		if r.backoffBaseMs > 0 {
			baseMs = r.backoffBaseMs
		}
		if r.backoffMaxMs > 0 {
			maxMs = r.backoffMaxMs
		}
	}
	return baseMs, max(baseMs, maxMs)
}

// usesRetryPolicy reports whether an enqueue needs log format 7: a replica
// of format 6 would ignore the per-message policy and dead-letter or
// delay the message differently from its leader.
func usesRetryPolicy(e *fsmpb.Enqueue) bool {
	for _, nm := range e.GetMessages() {
		if nm.GetMaxReceiveCount() != 0 || nm.GetBackoffBaseMs() != 0 || nm.GetBackoffMaxMs() != 0 {
			return true
		}
	}
	return false
}

// validateRetry checks a new message's own retry policy against the limits
// a queue's has.
func validateRetry(nm *fsmpb.NewMessage) error {
	if err := checkRange("max_receive_count", int64(nm.GetMaxReceiveCount()), 0, MaxReceiveCountLimit); err != nil {
		return err
	}
	if err := checkRange("backoff_base_ms", nm.GetBackoffBaseMs(), 0, MaxDelayMs); err != nil {
		return err
	}
	if err := checkRange("backoff_max_ms", nm.GetBackoffMaxMs(), 0, MaxDelayMs); err != nil {
		return err
	}
	if b, m := nm.GetBackoffBaseMs(), nm.GetBackoffMaxMs(); m > 0 && m < b {
		return fmt.Errorf("%w: backoff_max_ms %d is below backoff_base_ms %d", ErrInvalidArgument, m, b)
	}
	return nil
}
