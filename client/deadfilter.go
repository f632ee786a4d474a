package client

import (
	"time"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
)

// DeadFilter narrows a dead listing or a redrive to the dead messages that
// match every field set.
type DeadFilter struct {
	Type          string    // exactly this message type
	ErrorContains string    // the last error contains this text
	Since         time.Time // died at or after
	Until         time.Time // died before
}

func (f *DeadFilter) proto() *raftqv1.DeadFilter {
	if f == nil {
		return nil
	}
	p := &raftqv1.DeadFilter{Type: f.Type, ErrorContains: f.ErrorContains}
	if !f.Since.IsZero() {
		p.DeadSinceMs = f.Since.UnixMilli()
	}
	if !f.Until.IsZero() {
		p.DeadUntilMs = f.Until.UnixMilli()
	}
	return p
}
