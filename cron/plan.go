package cron

import "time"

// Misfire is what a pass does with slots it finds late: those whose time
// passed more than the schedule's grace before the pass (the meta group
// had no leader, the schedule's queue refused sends, the cluster was
// down). Slots within the grace always fire.
type Misfire int

const (
	// FireOnce fires the latest late slot and skips the earlier ones.
	FireOnce Misfire = iota
	// Skip skips every late slot.
	Skip
	// CatchUp fires the latest CatchUpMax late slots and skips the rest.
	CatchUp
)

// Policy is a schedule's misfire handling.
type Policy struct {
	Misfire    Misfire
	CatchUpMax int
	// Grace is how late a slot may be and still count as on time.
	Grace time.Duration
}

// Limits of one pass.
const (
	// MaxFirePerPass bounds the slots one pass sends for a schedule; the
	// next pass goes on from the last one recorded.
	MaxFirePerPass = 100
	// maxScan bounds the slots one pass looks at; a longer backlog is
	// worked through over several passes.
	maxScan = 100000
)

// Plan is what one pass does for a schedule.
type Plan struct {
	// Fire: the slots to send, oldest first.
	Fire []time.Time
	// Skipped counts the late slots the policy drops; all precede Fire.
	Skipped uint64
	// Last is the newest slot the plan settles (fired or skipped); zero
	// when nothing is due.
	Last time.Time
}

// PlanPass lists the slots of s due at now after the settled slot from
// (the last fired or skipped slot, or the schedule's start), and decides
// which fire under p. anchor anchors "@every" slots.
func PlanPass(s *Spec, anchor, from, now time.Time, p Policy) Plan {
	var late, onTime []time.Time
	last := from
	for n := 0; ; n++ {
		t := s.Next(anchor, last)
		if t.IsZero() || t.After(now) {
			break
		}
		if n == maxScan {
			// A backlog longer than one scan: the scanned slots are all
			// older than the ones the policy keeps, so skip them and let
			// the next pass judge the rest.
			return Plan{Skipped: uint64(len(late) + len(onTime)), Last: last}
		}
		if now.Sub(t) > p.Grace {
			late = append(late, t)
		} else {
			onTime = append(onTime, t)
		}
		last = t
	}
	var plan Plan
	keep := 0
	switch p.Misfire {
	case FireOnce:
		keep = min(1, len(late))
	case CatchUp:
		keep = min(p.CatchUpMax, len(late))
	}
	plan.Skipped = uint64(len(late) - keep)
	plan.Fire = append(late[len(late)-keep:len(late):len(late)], onTime...)
	if len(plan.Fire) > MaxFirePerPass {
		plan.Fire = plan.Fire[:MaxFirePerPass]
	}
	switch {
	case len(plan.Fire) > 0:
		plan.Last = plan.Fire[len(plan.Fire)-1]
	case len(late) > 0:
		plan.Last = late[len(late)-1]
	}
	return plan
}

// DefaultGrace is how late a slot may fire before it counts as missed,
// for a schedule that names no grace: long enough to cover a meta leader
// election and a shard's, so a failover alone misses no slot.
const DefaultGrace = time.Minute
