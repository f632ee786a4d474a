package checker

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/raftq/raftq/jepsen-lite/history"
)

// FaultStats is what the history says one fault kind did.
type FaultStats struct {
	Kind string `json:"kind"`
	// Fired counts faults applied; Failed those whose apply or undo
	// failed, or that were never undone.
	Fired  int `json:"fired"`
	Failed int `json:"failed"`
	// Held is the faults' total time in effect, from the start of the
	// apply to the end of the undo; MaxHeld the longest one.
	Held    time.Duration `json:"held_ns"`
	MaxHeld time.Duration `json:"max_held_ns"`
	// Errors quotes the failures.
	Errors []string `json:"errors,omitempty"`
}

// Faults summarises the nemesis operations of ops per kind, requested
// kinds first (in the setup's order, even those that never fired), then
// any other kind seen.
func Faults(ops []history.Op) []FaultStats {
	ix := build(ops)
	return ix.faults()
}

func (ix *index) faults() []FaultStats {
	var order []string
	if ix.setup != nil {
		order = slices.Clone(ix.setup.Nemesis)
	}
	by := map[string]*FaultStats{}
	get := func(kind string) *FaultStats {
		if by[kind] == nil {
			by[kind] = &FaultStats{Kind: kind}
			if !slices.Contains(order, kind) {
				order = append(order, kind)
			}
		}
		return by[kind]
	}
	fail := func(s *FaultStats, format string, args ...any) {
		s.Failed++
		if len(s.Errors) < maxExamples {
			// Joined errors (an apply and its heal) on one line.
			s.Errors = append(s.Errors, strings.ReplaceAll(fmt.Sprintf(format, args...), "\n", "; "))
		}
	}
	// Faults run one at a time: invoke, then ok (applied) or info with an
	// error (the apply failed), then after an ok an info (undone).
	var cur *history.Op
	applied := false
	for k := range ix.nemesis {
		op := &ix.nemesis[k]
		switch op.Type {
		case history.Invoke:
			if cur != nil {
				fail(get(cur.Kind), "%s: never finished", cur.Fault)
			}
			cur, applied = op, false
		case history.OK:
			if cur != nil && !applied {
				applied = true
				get(cur.Kind).Fired++
			}
		default:
			if cur == nil {
				continue
			}
			s := get(cur.Kind)
			switch {
			case !applied:
				fail(s, "%s: could not be applied: %s", cur.Fault, op.Error)
			case op.Error != "":
				fail(s, "%s: could not be undone: %s", op.Fault, op.Error)
			}
			if applied {
				held := time.Duration(op.Time - cur.Time)
				s.Held += held
				s.MaxHeld = max(s.MaxHeld, held)
			}
			cur = nil
		}
	}
	if cur != nil {
		fail(get(cur.Kind), "%s: never undone", cur.Fault)
	}
	out := make([]FaultStats, 0, len(order))
	for _, k := range order {
		out = append(out, *get(k))
	}
	return out
}

// nemesis: the faults the run asked for happened. A run whose schedule
// never fired a requested kind, or whose fault could not be applied or
// undone (iptables failing, a node that did not come back), proves less
// than it claims and is INVALID.
//
//   - no-setup: the history does not say which faults were requested.
//   - not-fired: a requested kind was never applied.
//   - nemesis-failed: a fault's apply or undo failed, or it never ended.
func nemesisCheck(ix *index) *Result {
	r := newResult("nemesis")
	if ix.setup == nil {
		r.violate("no-setup", "the history has no setup: which faults were requested is unknown")
	}
	for _, s := range ix.faults() {
		r.Count["fired-"+s.Kind] += s.Fired
		requested := ix.setup != nil && slices.Contains(ix.setup.Nemesis, s.Kind)
		if requested && s.Fired == 0 {
			r.violate("not-fired", "%s was requested and never applied", s.Kind)
		}
		for _, e := range s.Errors {
			r.violate("nemesis-failed", "%s", e)
		}
		if n := s.Failed - len(s.Errors); n > 0 {
			r.Count["nemesis-failed"] += n
		}
	}
	return r
}
