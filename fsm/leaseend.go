package fsm

import (
	"fmt"

	"github.com/raftq/raftq/fsm/fsmpb"
)

// What a receipt that is not a live lease gets. A consumer must be able to
// tell "your ack went through" (its answer was lost and the ack was
// retried) from "you lost the message" (the lease ended and the message was
// or will be delivered again), so the answer says which, from replicated
// state only: the message's state, its last lease epoch and the outcome its
// attempt history records for the receipt's epoch. Every replica would
// answer the same. Texts name no message id: the server prefixes the id in
// the form clients see (wire.MessageID), which the FSM does not know.

// ackedWith reports whether m was acked with the lease of epoch: it is
// ACKED and its last lease had that epoch. A message is acked only through
// its live lease and an ACKED message is never leased again, so its last
// lease epoch is the one the ack used (its history's last attempt, outcome
// ACKED, records the same).
func ackedWith(m *msg, epoch uint64) bool {
	return m.state == fsmpb.State_STATE_ACKED && epoch != 0 && m.leaseEpoch == epoch
}

// attemptOf finds the attempt of m's history granted with epoch. History
// keeps the last MaxHistory attempts, so an old epoch may be missing.
func attemptOf(m *msg, epoch uint64) (attempt, bool) {
	if epoch == 0 {
		return attempt{}, false // redrive entries carry no epoch
	}
	for i := len(m.history) - 1; i >= 0; i-- {
		if m.history[i].epoch == epoch {
			return m.history[i], true
		}
	}
	return attempt{}, false
}

// howEnded says how the lease of epoch ended, as the history records it.
func howEnded(m *msg, epoch uint64) string {
	a, ok := attemptOf(m, epoch)
	if !ok {
		return "ended"
	}
	switch a.outcome {
	case fsmpb.Reason_REASON_EXPIRED:
		return "expired"
	case fsmpb.Reason_REASON_NACKED:
		return "was nacked"
	case fsmpb.Reason_REASON_POISON:
		return "was dead-lettered"
	case fsmpb.Reason_REASON_ACKED:
		return "was acked"
	case fsmpb.Reason_REASON_SNOOZED:
		return "was snoozed"
	}
	return "ended"
}

// granted reports whether epoch may have been a lease of m: epochs are
// unique per shard and only grow, so one above m's last lease never was.
// One at or below it that the history no longer holds may have been (the
// answer then says only that the lease ended).
func granted(m *msg, epoch uint64) bool {
	return epoch != 0 && epoch <= m.leaseEpoch
}

// notLive is the item result for a receipt that is not m's live lease
// (liveLease said no). Ack handles its own repeat before calling it; for
// nack, extend and dead-letter a lease already acked is stale too, since
// the message is done and none of them may undo that.
func (s *state) notLive(r *fsmpb.Receipt) *fsmpb.ItemResult {
	epoch := r.GetLeaseEpoch()
	m, ok := s.get(r.GetMessageId())
	if !ok {
		if id := r.GetMessageId(); id != 0 && id < s.nextID {
			return &fsmpb.ItemResult{Status: status(fsmpb.Code_CODE_MESSAGE_NOT_FOUND,
				"the message is no longer on record (settled or removed longer ago than its queue keeps records): the outcome of lease %d cannot be confirmed", epoch)}
		}
		return &fsmpb.ItemResult{Status: status(fsmpb.Code_CODE_MESSAGE_NOT_FOUND, "no such message")}
	}
	stale := func(format string, args ...any) *fsmpb.ItemResult {
		return &fsmpb.ItemResult{Status: status(fsmpb.Code_CODE_STALE_RECEIPT, "lease %d %s", epoch, fmt.Sprintf(format, args...))}
	}
	if !granted(m, epoch) {
		return stale("is not a lease of this message")
	}
	switch m.state {
	case fsmpb.State_STATE_ACKED:
		if ackedWith(m, epoch) {
			return stale("was already acked: the message is done")
		}
		return stale("%s and the message was already acked by another receipt", howEnded(m, epoch))
	case fsmpb.State_STATE_LEASED:
		if m.leaseEpoch == epoch {
			// The deadline passed in this very entry's clock step.
			return stale("expired; the message will be delivered again")
		}
		return stale("%s and the message was delivered again", howEnded(m, epoch))
	case fsmpb.State_STATE_DEAD:
		return stale("%s and the message is in the dead-letter queue", howEnded(m, epoch))
	}
	// READY or DELAYED: the lease ended and no other has been granted yet.
	return stale("%s; the message will be delivered again", howEnded(m, epoch))
}

// ackRepeat is the result of an ack whose lease already ended in an ack:
// the earlier ack committed (its answer may have been lost), so this one
// succeeds, marked, and changes nothing.
func ackRepeat() *fsmpb.ItemResult {
	return &fsmpb.ItemResult{Status: okStatus(), AlreadyAcked: true}
}
