package checker

import (
	"slices"

	"github.com/raftq/raftq/jepsen-lite/history"
)

// cronCheck judges the cron workload (docs/jobs.md, "Recurring jobs
// (cron)"): for each "@every" schedule, every slot after its start fires
// at most once, every slot up to the last one recorded fired unless the
// misfire policy counted it skipped, a catch-up schedule skips none
// within its bound, and no manual trigger arrives twice. A slot after the
// last recorded one may have been sent by a leader that died before
// recording it: it must still be a slot and arrive once. A history with
// no cron schedule passes.
func cronCheck(ops []history.Op) *Result {
	r := newResult("cron")
	// A message received twice (its ack was lost, its lease ran out) is
	// one fire; two messages for one slot are two.
	slotIDs := map[string]map[int64]map[string]bool{}
	trigIDs := map[string]map[uint64]map[string]bool{}
	var states []*history.Cron
	started := false
	for _, op := range ops {
		if op.F == history.FCronState && op.Type == history.Invoke {
			started = true
		}
		if op.F == history.FCronState && op.Type == history.Fail {
			r.violate("cron-final", "the cron workload could not finish: %s", op.Error)
		}
		if op.Type != history.OK || op.Cron == nil {
			continue
		}
		c := op.Cron
		switch op.F {
		case history.FCron:
			r.Count["received"]++
			if c.Trigger > 0 {
				addID(trigIDs, c.Schedule, c.Trigger, op.MessageID)
				continue
			}
			addID(slotIDs, c.Schedule, c.SlotMs, op.MessageID)
		case history.FCronState:
			states = append(states, c)
		}
	}
	if started && len(states) == 0 {
		r.violate("cron-final", "the cron workload started but recorded no schedule's final state")
	}
	for _, st := range states {
		if st.Fired == 0 {
			r.violate("cron-idle", "schedule %q fired no slot in the whole run", st.Schedule)
		}
	}
	slots, triggers := counts(slotIDs), counts(trigIDs)
	for _, st := range states {
		got := slots[st.Schedule]
		delete(slots, st.Schedule)
		cronSchedule(r, st, got, triggers[st.Schedule])
	}
	for name := range slots {
		r.violate("cron-unknown", "messages of schedule %q, which has no final record", name)
	}
	return r
}

func cronSchedule(r *Result, st *history.Cron, got map[int64]int, trig map[uint64]int) {
	if st.EveryMs <= 0 {
		r.violate("cron-setup", "schedule %q: no interval recorded", st.Schedule)
		return
	}
	sorted := make([]int64, 0, len(got))
	for s := range got {
		sorted = append(sorted, s)
	}
	slices.Sort(sorted)
	for _, s := range sorted {
		switch {
		case s <= st.CreatedMs || (s-st.CreatedMs)%st.EveryMs != 0:
			r.violate("cron-bogus-slot", "schedule %q: a message for %d, not a slot of every %d ms from %d", st.Schedule, s, st.EveryMs, st.CreatedMs)
		case got[s] > 1:
			r.violate("cron-double-fire", "schedule %q: slot %d fired %d times", st.Schedule, s, got[s])
		}
	}
	r.Count["slots-fired"] += len(got)
	r.Count["slots-skipped"] += int(st.Skipped)
	r.Count["triggers"] += len(trig)
	var missing []int64
	expected := uint64(0)
	for s := st.CreatedMs + st.EveryMs; s <= st.LastSlotMs; s += st.EveryMs {
		expected++
		if got[s] == 0 {
			missing = append(missing, s)
		}
	}
	if uint64(len(missing)) > st.Skipped {
		r.violate("cron-missed-slot", "schedule %q: %d slots up to the last recorded never arrived (first %d), but the misfire policy skipped %d",
			st.Schedule, len(missing), missing[0], st.Skipped)
	}
	if st.Misfire == "catch-up" && st.Skipped > 0 && expected <= uint64(st.CatchUpMax) {
		r.violate("cron-skipped-within-catch-up", "schedule %q: %d slots skipped, although catch-up covers %d and only %d were due",
			st.Schedule, st.Skipped, st.CatchUpMax, expected)
	}
	if st.Fired+st.Skipped != expected {
		r.violate("cron-record", "schedule %q: recorded %d fired + %d skipped, but %d slots are up to the last recorded", st.Schedule, st.Fired, st.Skipped, expected)
	}
	for n, k := range trig {
		if k > 1 {
			r.violate("cron-double-trigger", "schedule %q: trigger %d arrived %d times", st.Schedule, n, k)
		}
	}
	if uint64(len(trig)) < st.TriggersFired {
		r.violate("cron-lost-trigger", "schedule %q: %d triggers recorded fired, %d arrived", st.Schedule, st.TriggersFired, len(trig))
	}
}

func addID[K comparable](m map[string]map[K]map[string]bool, schedule string, k K, id string) {
	if m[schedule] == nil {
		m[schedule] = map[K]map[string]bool{}
	}
	if m[schedule][k] == nil {
		m[schedule][k] = map[string]bool{}
	}
	m[schedule][k][id] = true
}

func counts[K comparable](m map[string]map[K]map[string]bool) map[string]map[K]int {
	out := make(map[string]map[K]int, len(m))
	for s, byKey := range m {
		out[s] = make(map[K]int, len(byKey))
		for k, ids := range byKey {
			out[s][k] = len(ids)
		}
	}
	return out
}
