package worker

import (
	"errors"
	"fmt"
	"time"
)

// ErrPoison marks a message the handler can never process. Returned (or
// wrapped, see Poison) from a handler, the message is dead-lettered at once
// instead of being retried.
var ErrPoison = errors.New("poison message")

// ErrLeaseLost is the cause of a handler's context cancellation when an
// extension found the lease gone: the message was (or will be) delivered to
// another consumer, and this handler's result will be discarded.
var ErrLeaseLost = errors.New("lease lost")

// ErrShutdown is the cause of a handler's context cancellation when the
// worker stops and the drain timeout passed before the handler finished.
var ErrShutdown = errors.New("worker shut down before the handler finished")

// ErrTimeout is the cause of a handler's context cancellation when its job
// ran past its execution timeout (Options.Timeout, Options.TimeoutFor);
// the job is nacked with an error text that begins "timeout".
var ErrTimeout = errors.New("timeout")

// Poison wraps err so the message is dead-lettered at once with err's text.
func Poison(err error) error {
	if err == nil {
		err = ErrPoison
	}
	return &poisonError{err: err}
}

type poisonError struct{ err error }

func (p *poisonError) Error() string        { return p.err.Error() }
func (p *poisonError) Unwrap() error        { return p.err }
func (p *poisonError) Is(target error) bool { return target == ErrPoison }

// Retry asks for the message to be delivered again after d (instead of the
// queue's backoff policy), recording err's text.
func Retry(after time.Duration, err error) error {
	if err == nil {
		err = errors.New("retry requested")
	}
	return &RetryError{After: max(after, 0), Err: err}
}

// Snooze asks for the message to be handed back, ready again after d,
// without using up an attempt: its receive count drops by this delivery,
// so a job that snoozes is never dead-lettered for it (client.Snooze).
// The queue's retention still bounds how long a job can be snoozed.
func Snooze(after time.Duration) error {
	return &SnoozeError{After: max(after, 0)}
}

// SnoozeError is what Snooze returns.
type SnoozeError struct {
	After time.Duration
}

func (s *SnoozeError) Error() string { return fmt.Sprintf("snooze for %v", s.After) }

// RetryError is what Retry returns.
type RetryError struct {
	After time.Duration
	Err   error
}

func (r *RetryError) Error() string { return fmt.Sprintf("retry after %v: %v", r.After, r.Err) }
func (r *RetryError) Unwrap() error { return r.Err }

// PanicError is a handler's panic, as Settlement.Err reports it: the value
// it panicked with and the stack where it did.
type PanicError struct {
	Value any
	Stack []byte
}

func (p *PanicError) Error() string { return fmt.Sprintf("panic: %v", p.Value) }

// Unwrap exposes a panic value that is an error (panic(err)).
func (p *PanicError) Unwrap() error {
	err, _ := p.Value.(error)
	return err
}
