package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
)

// Sentinel errors. Every error the client returns for a server status wraps
// one of these (matched with errors.Is) and keeps the server's message.
var (
	// ErrStaleReceipt: FAILED_PRECONDITION. The lease behind a receipt expired
	// or was granted again, or the message is in a state the call does not
	// allow (for example cancelling a leased message). Nothing changed.
	ErrStaleReceipt = errors.New("stale receipt or wrong message state")
	// ErrUpgradePending: FAILED_PRECONDITION naming a log format. The call
	// needs a feature that some replica's binary predates (a rolling
	// upgrade under way, docs/logformats.md); nothing changed, and
	// it succeeds once every node runs the new release.
	ErrUpgradePending = errors.New("a replica's binary predates this call")
	// ErrNotFound: NOT_FOUND. Unknown queue or message.
	ErrNotFound = errors.New("not found")
	// ErrInvalid: INVALID_ARGUMENT, or input the client rejects before sending
	// (a malformed receipt or message id).
	ErrInvalid = errors.New("invalid argument")
	// ErrExists: ALREADY_EXISTS. A queue of that name exists with another policy.
	ErrExists = errors.New("already exists")
	// ErrUnavailable: UNAVAILABLE, or no node could be reached within the
	// retry budget.
	ErrUnavailable = errors.New("unavailable")
	// ErrExhausted: RESOURCE_EXHAUSTED. A limit or quota was hit.
	ErrExhausted = errors.New("resource exhausted")
	// ErrDenied: PERMISSION_DENIED. The caller may not do this, e.g. settle
	// a receipt whose signature the node cannot verify (altered, forged, or
	// signed with a key rotated out).
	ErrDenied = errors.New("permission denied")
	// ErrUnauthenticated: UNAUTHENTICATED. The node does not know who is
	// calling, e.g. a plaintext client on a TLS port.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrNotSent: the call never left the client (a coalesced send whose
	// context ended while it waited for a call, or any call made or
	// waiting when the client closed), so making it again cannot duplicate
	// it. The error also wraps the cause (the context's error, ErrClosed).
	ErrNotSent = errors.New("not sent")
	// ErrOutcomeUnknown: the call reached a node but no answer came back (a
	// connection broke, a node stopped answering, the context or the
	// client's Close ended it while it was out): it may or may not have
	// taken effect. A send that returns it may be in the queue; look it up,
	// or send it again with the same dedup key, which cannot enqueue it
	// twice within the queue's dedup window. The error also wraps the
	// status or cause (ErrUnavailable, context.DeadlineExceeded, ErrClosed).
	ErrOutcomeUnknown = errors.New("outcome unknown")
	// ErrClosed: the client was closed (Close or Drain) before or while the
	// call was made. It comes with ErrNotSent or ErrOutcomeUnknown, which
	// say whether the call may have taken effect.
	ErrClosed = errors.New("client closed")
)

// BatchError reports a batch call (AckBatch, SendBatch) in which some
// items failed. Errs has one entry per item, in the order given: nil for
// an item that succeeded. errors.Is and errors.As see every item's error,
// so errors.Is(err, ErrStaleReceipt) holds if any receipt was stale.
type BatchError struct {
	Errs []error
}

func (e *BatchError) Error() string {
	var b strings.Builder
	shown := 0
	for i, err := range e.Errs {
		if err == nil {
			continue
		}
		if shown == 3 {
			b.WriteString("; ...")
			break
		}
		if shown > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "item %d: %v", i, err)
		shown++
	}
	return fmt.Sprintf("%d of %d items failed: %s", e.Failed(), len(e.Errs), b.String())
}

// Failed is how many items failed.
func (e *BatchError) Failed() int {
	n := 0
	for _, err := range e.Errs {
		if err != nil {
			n++
		}
	}
	return n
}

// Unwrap exposes the items' errors to errors.Is and errors.As.
func (e *BatchError) Unwrap() []error {
	out := make([]error, 0, len(e.Errs))
	for _, err := range e.Errs {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// batchError is nil when no item failed, else a *BatchError over errs.
func batchError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return &BatchError{Errs: errs}
		}
	}
	return nil
}

// Error is a server status as the client reports it. Error() is the server's
// message; errors.Is matches the sentinel for the code.
type Error struct {
	Code codes.Code
	Msg  string
	// RetryAfter: on ErrExhausted, when the server asked the caller to
	// try again (a google.rpc.RetryInfo); 0 when it named no time.
	RetryAfter time.Duration
	// Held: the client answered the call itself, without sending it,
	// keeping a node's refusal of the queue's sends (WithSendHold): within
	// the node's retry time (RetryAfter is the time left), or after it
	// while the node takes fewer than half the sends made (RetryAfter is
	// half the node's retry time).
	Held bool
}

func (e *Error) Error() string { return e.Msg }

// GRPCStatus lets status.FromError and status.Code see the original code.
func (e *Error) GRPCStatus() *status.Status { return status.New(e.Code, e.Msg) }

// Unwrap exposes the sentinel (and, for deadlines and cancellation, the
// matching context error) to errors.Is.
func (e *Error) Unwrap() []error {
	switch e.Code {
	case codes.FailedPrecondition:
		// fsm.FormatLagError's text (fsm/format.go); a status detail
		// would need a new field in every node's answers.
		if strings.Contains(e.Msg, "needs log format") {
			return []error{ErrUpgradePending}
		}
		return []error{ErrStaleReceipt}
	case codes.NotFound:
		return []error{ErrNotFound}
	case codes.InvalidArgument, codes.OutOfRange:
		return []error{ErrInvalid}
	case codes.AlreadyExists:
		return []error{ErrExists}
	case codes.Unavailable:
		return []error{ErrUnavailable}
	case codes.ResourceExhausted:
		return []error{ErrExhausted}
	case codes.PermissionDenied:
		return []error{ErrDenied}
	case codes.Unauthenticated:
		return []error{ErrUnauthenticated}
	case codes.DeadlineExceeded:
		return []error{context.DeadlineExceeded}
	case codes.Canceled:
		return []error{context.Canceled}
	}
	return nil
}

// fromStatus converts a gRPC error into an *Error. Errors that are not
// statuses (rare: a codec failure) are returned unchanged.
func fromStatus(err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	after, _ := retryAfter(err)
	return &Error{Code: st.Code(), Msg: st.Message(), RetryAfter: after}
}

// RetryAfter is how long the server asked the caller to wait before
// trying a refused call again (RESOURCE_EXHAUSTED past a quota or a
// node's limit); ok is false when err carries no such request.
func RetryAfter(err error) (d time.Duration, ok bool) {
	var e *Error
	if errors.As(err, &e) && e.RetryAfter > 0 {
		return e.RetryAfter, true
	}
	return retryAfter(err)
}

// itemError converts a per-item google.rpc.Code result into an error.
func itemError(code int32, msg string) error {
	if code == 0 {
		return nil
	}
	if msg == "" {
		msg = codes.Code(code).String()
	}
	return &Error{Code: codes.Code(code), Msg: msg}
}

// sendItemError is itemError for a send's item, with the retry time the
// server gave a refusal past a quota.
func sendItemError(r *raftqv1.SendResult) error {
	err := itemError(r.GetCode(), r.GetError())
	var e *Error
	if errors.As(err, &e) {
		e.RetryAfter = time.Duration(r.GetRetryAfterMs()) * time.Millisecond
	}
	return err
}

// invalid reports input the client refuses before any call.
func invalid(msg string) error { return &Error{Code: codes.InvalidArgument, Msg: msg} }
