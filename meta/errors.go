package meta

import (
	"errors"
	"fmt"
)

var (
	// ErrExists: a queue of that name exists with a different policy.
	ErrExists = errors.New("meta: queue exists with a different policy")
	// ErrNotFound: no queue of that name.
	ErrNotFound = errors.New("meta: queue not found")
	// ErrInvalid wraps a rejected queue name or policy.
	ErrInvalid = errors.New("meta: invalid argument")
	// ErrAlreadyPlaced: the shard map is written once and never replaced.
	ErrAlreadyPlaced = errors.New("meta: shard map already placed")
	// ErrRefused: a valid change the cluster's state does not allow now
	// (a move already runs on the shard, a group would shrink).
	ErrRefused = errors.New("meta: refused")
	// ErrQuota: past a tenant's quota (docs/tenancy.md).
	ErrQuota = errors.New("meta: quota exceeded")
)

// RefusedError is a write the meta group refused, or that was refused
// before it was proposed. Kind is the sentinel it matches (ErrExists,
// ErrNotFound, ErrInvalid, ErrAlreadyPlaced); Reason is the refusal in
// words a client can be shown as they are.
type RefusedError struct {
	Kind   error
	Reason string
}

func (e *RefusedError) Error() string { return e.Kind.Error() + ": " + e.Reason }

// Unwrap exposes Kind to errors.Is.
func (e *RefusedError) Unwrap() error { return e.Kind }

func refused(kind error, format string, args ...any) *RefusedError {
	return &RefusedError{Kind: kind, Reason: fmt.Sprintf(format, args...)}
}
