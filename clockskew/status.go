package clockskew

import "time"

// Status is one node's clock check as metrics export it.
type Status struct {
	State State
	// Offset is this node's clock minus the median clock (Verdict.Offset).
	Offset time.Duration
	Bound  time.Duration
	Peers  map[string]Estimate
}
