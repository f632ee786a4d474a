package fsm

import "errors"

// ErrInvalidArgument is wrapped by every validation error.
var ErrInvalidArgument = errors.New("invalid argument")
