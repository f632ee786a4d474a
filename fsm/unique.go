package fsm

import (
	"fmt"
	"math"

	"github.com/raftq/raftq/fsm/fsmpb"
)

// Unique jobs (docs/jobs.md) are the dedup key with a scope: held for a
// period of the sender's choosing instead of the queue's dedup window,
// and/or only while the message is live (delayed, ready or leased). While
// the key is held, a send with it returns the holder's id, marked
// deduplicated; concurrent senders all land in one raft log, so exactly
// one of them creates the job.

// heldUntilDone is the expiry of a key held only while its message is live:
// releaseUnique drops it when the message leaves the live states.
const heldUntilDone = math.MaxInt64

// dedupUntil is when the dedup key of new message nm stops matching.
func (s *state) dedupUntil(q *queue, nm *fsmpb.NewMessage) int64 {
	switch w := nm.GetUniqueForMs(); {
	case w > 0:
		return s.clock + w
	case nm.GetUniqueUntilDone():
		return heldUntilDone
	}
	return s.clock + q.policy.GetDedupWindowMs()
}

// releaseUnique drops m's dedup key when m holds it only while live. Called
// as m leaves the live states (acked, dead, cancelled, purged, dropped,
// deleted with its queue). A key now held by another message (m's own
// expired and was reused) is left alone. A message redriven from the DLQ
// does not take its key back: another job may hold it by then.
func (s *state) releaseUnique(m *msg) {
	if !m.uniqueUntilDone {
		return
	}
	h := hashDedup(m.q.name, m.dedupKey)
	if e, ok := s.dedup.get(h); ok && e.id == m.id {
		s.dropDedup(h)
	}
}

// validateUnique checks the unique-job fields of a new message.
func validateUnique(m *fsmpb.NewMessage) error {
	if m.GetUniqueForMs() == 0 && !m.GetUniqueUntilDone() {
		return nil
	}
	if m.GetDedupKey() == "" {
		return fmt.Errorf("%w: unique_for and unique_until_done need a dedup key (the job's unique key)", ErrInvalidArgument)
	}
	return checkRange("unique_for_ms", m.GetUniqueForMs(), 0, MaxRetentionMs)
}

// usesUnique reports whether an enqueue needs log format 7: a replica of
// format 6 would ignore the fields and hold the key for the queue's window,
// and its dedup answers would part from its leader's.
func usesUnique(e *fsmpb.Enqueue) bool {
	for _, m := range e.GetMessages() {
		if m.GetUniqueForMs() != 0 || m.GetUniqueUntilDone() {
			return true
		}
	}
	return false
}
