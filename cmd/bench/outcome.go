package main

import (
	"context"
	"errors"

	"github.com/raftq/raftq/client"
)

// sendClass is what a failed send told its sender. The overload workload
// judges the cluster by it: a flooded cluster should say "not now, come
// back in d" (refused) rather than leave a sender to time out, which
// tells it neither whether its message was stored nor when to try again.
type sendClass int

const (
	// classRefused: RESOURCE_EXHAUSTED with a retry time (google.rpc.RetryInfo,
	// or a SendBatch item's retry_after_ms). Nothing was stored.
	classRefused sendClass = iota
	// classRefusedBare: RESOURCE_EXHAUSTED naming no retry time. Nothing
	// was stored, but the sender is not told when to come back.
	classRefusedBare
	// classTimeout: no answer within the deadline; the outcome is unknown.
	classTimeout
	// classUnavailable: no node could take the call (no leader, a broken
	// connection, an answer lost); the outcome may be unknown.
	classUnavailable
	// classOther: anything else (a bad request, the client closed, the run
	// interrupted).
	classOther
	numSendClasses
)

// classifySend sorts a send's error. Outcome-unknown errors are never a
// refusal, whatever they wrap: only a definite answer says nothing was
// stored.
func classifySend(err error) sendClass {
	switch {
	case errors.Is(err, client.ErrExhausted) && !errors.Is(err, client.ErrOutcomeUnknown):
		if d, ok := client.RetryAfter(err); ok && d > 0 {
			return classRefused
		}
		return classRefusedBare
	case errors.Is(err, context.DeadlineExceeded):
		return classTimeout
	case errors.Is(err, client.ErrUnavailable), errors.Is(err, client.ErrOutcomeUnknown):
		return classUnavailable
	}
	return classOther
}

// definite reports whether a send of this class is known not to be stored.
func (c sendClass) definite() bool { return c == classRefused || c == classRefusedBare }

// ledgerState is how the ledger books a failed send of this class.
func (c sendClass) ledgerState() sendState {
	if c.definite() {
		return sendRefused
	}
	return sendUnknown
}

// sendOutcomes counts what a load's sends got, by message (a message
// resent after a refusal counts each refusal).
type sendOutcomes struct {
	Accepted uint64 `json:"accepted"`
	Refused  uint64 `json:"refused_with_retry"`
	// Held: of Refused, those the client answered itself, without
	// sending them (client.WithSendHold).
	Held        uint64 `json:"refused_by_client_hold"`
	RefusedBare uint64 `json:"refused_without_retry"`
	Timeouts    uint64 `json:"timeouts"`
	Unavailable uint64 `json:"unavailable"`
	Other       uint64 `json:"other_errors"`
}

// failedOtherwise is every failure but a refusal with a retry time: what a
// flooded cluster should not give a sender.
func (o sendOutcomes) failedOtherwise() uint64 {
	return o.RefusedBare + o.Timeouts + o.Unavailable + o.Other
}
