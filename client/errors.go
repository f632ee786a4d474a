package client

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sentinel errors. Every error the client returns for a server status wraps
// one of these (matched with errors.Is) and keeps the server's message.
var (
	// ErrStaleReceipt: FAILED_PRECONDITION. The lease behind a receipt expired
	// or was granted again, or the message is in a state the call does not
	// allow (for example cancelling a leased message). Nothing changed.
	ErrStaleReceipt = errors.New("stale receipt or wrong message state")
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
	// ErrNotSent: a coalesced send whose context ended while it waited for
	// a call; it never left the client, so sending it again cannot
	// duplicate it. The error also wraps the context's.
	ErrNotSent = errors.New("not sent")
)

// Error is a server status as the client reports it. Error() is the server's
// message; errors.Is matches the sentinel for the code.
type Error struct {
	Code codes.Code
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// GRPCStatus lets status.FromError and status.Code see the original code.
func (e *Error) GRPCStatus() *status.Status { return status.New(e.Code, e.Msg) }

// Unwrap exposes the sentinel (and, for deadlines and cancellation, the
// matching context error) to errors.Is.
func (e *Error) Unwrap() []error {
	switch e.Code {
	case codes.FailedPrecondition:
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
	return &Error{Code: st.Code(), Msg: st.Message()}
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

// invalid reports input the client refuses before any call.
func invalid(msg string) error { return &Error{Code: codes.InvalidArgument, Msg: msg} }
