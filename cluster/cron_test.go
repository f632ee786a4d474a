package cluster

import (
	"testing"
	"time"

	"github.com/raftq/raftq/cron"
	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/meta/metapb"
)

// TestCronPlan: a pass starts after the recorded slot, sends each due
// slot under its slot's dedup key, and sends nothing while paused.
func TestCronPlan(t *testing.T) {
	s := &metapb.CronSchedule{Name: "tick", Id: 4, Spec: "@every 1s", Queue: "q", CreatedMs: 10_000, AfterMs: 10_000, LastSlotMs: 13_000,
		Misfire: metapb.CronMisfire_CRON_MISFIRE_CATCH_UP, CatchUpMax: 2, MisfireGraceMs: 1000}
	plan, msgs, err := cronPlan(s, time.UnixMilli(18_500))
	if err != nil {
		t.Fatal(err)
	}
	// Slots 14-18 s are due; 14-17 s are more than 1 s late: catch-up 2
	// fires 16 and 17 s, skips 14 and 15 s; 18 s is on time.
	if plan.Skipped != 2 || len(msgs) != 3 || msgs[0].GetDedupKey() != "cron:4:16000" || msgs[2].GetDedupKey() != "cron:4:18000" {
		keys := []string{}
		for _, m := range msgs {
			keys = append(keys, m.GetDedupKey())
		}
		t.Fatalf("skipped %d, keys %v", plan.Skipped, keys)
	}
	if msgs[0].GetAttributes()[meta.CronAttrSlot] != "16000" {
		t.Fatalf("attributes %v", msgs[0].GetAttributes())
	}
	s.Paused = true
	if plan, msgs, _ := cronPlan(s, time.UnixMilli(18_500)); len(msgs) != 0 || plan.Skipped != 0 {
		t.Fatalf("paused schedule planned %d messages, %d skipped", len(msgs), plan.Skipped)
	}
}

func TestCronPolicy(t *testing.T) {
	for m, want := range map[metapb.CronMisfire]cron.Misfire{
		metapb.CronMisfire_CRON_MISFIRE_FIRE_ONCE: cron.FireOnce,
		metapb.CronMisfire_CRON_MISFIRE_SKIP:      cron.Skip,
		metapb.CronMisfire_CRON_MISFIRE_CATCH_UP:  cron.CatchUp,
	} {
		if got := cronPolicy(&metapb.CronSchedule{Misfire: m}); got.Misfire != want || got.Grace != cron.DefaultGrace {
			t.Errorf("%v: %+v", m, got)
		}
	}
	if got := cronPolicy(&metapb.CronSchedule{MisfireGraceMs: 1500}); got.Grace != 1500*time.Millisecond {
		t.Errorf("grace %v", got.Grace)
	}
}
