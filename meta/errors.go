package meta

import (
	"errors"
	"fmt"
)

var (
	// ErrNotLeader is wrapped by every write attempted on a node that is not
	// the meta leader; errors.As to NotLeaderError finds the leader's id.
	ErrNotLeader = errors.New("meta: not the leader")
	// ErrExists: a queue of that name exists with a different policy.
	ErrExists = errors.New("meta: queue exists with a different policy")
	// ErrNotFound: no queue of that name.
	ErrNotFound = errors.New("meta: queue not found")
	// ErrInvalid wraps a rejected queue name or policy.
	ErrInvalid = errors.New("meta: invalid argument")
	// ErrAlreadyPlaced: the shard map is written once and never replaced.
	ErrAlreadyPlaced = errors.New("meta: shard map already placed")
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

// NotLeaderError says who leads the meta group as this node last saw it
// (LeaderID is empty while no leader is known).
type NotLeaderError struct {
	LeaderID string
}

func (e NotLeaderError) Error() string {
	if e.LeaderID == "" {
		return "meta: not the leader (no leader known)"
	}
	return fmt.Sprintf("meta: not the leader (leader %s)", e.LeaderID)
}

// Is makes errors.Is(err, ErrNotLeader) hold for a NotLeaderError.
func (e NotLeaderError) Is(target error) bool { return target == ErrNotLeader }
