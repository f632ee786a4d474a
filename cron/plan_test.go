package cron

import (
	"testing"
	"time"
)

func TestPlanPass(t *testing.T) {
	s := mustParse(t, "@every 1s", "")
	anchor := time.UnixMilli(0)
	sec := func(n int64) time.Time { return time.UnixMilli(n * 1000) }
	// Settled up to 10 s; now 30 s with a 5 s grace: slots 11-24 are late,
	// 25-30 on time.
	from, now := sec(10), sec(30)
	grace := 5 * time.Second
	for _, tc := range []struct {
		name      string
		p         Policy
		fireFirst int64
		fires     int
		skipped   uint64
	}{
		{"skip", Policy{Misfire: Skip, Grace: grace}, 25, 6, 14},
		{"fire once", Policy{Misfire: FireOnce, Grace: grace}, 24, 7, 13},
		{"catch up 3", Policy{Misfire: CatchUp, CatchUpMax: 3, Grace: grace}, 22, 9, 11},
		{"catch up all", Policy{Misfire: CatchUp, CatchUpMax: 1000, Grace: grace}, 11, 20, 0},
	} {
		p := PlanPass(s, anchor, from, now, tc.p)
		if len(p.Fire) != tc.fires || p.Skipped != tc.skipped || !p.Fire[0].Equal(sec(tc.fireFirst)) || !p.Last.Equal(now) {
			t.Errorf("%s: fire %d from %v, skipped %d, last %v; want %d from %d s, %d, 30 s",
				tc.name, len(p.Fire), p.Fire[0].UnixMilli(), p.Skipped, p.Last.UnixMilli(), tc.fires, tc.fireFirst, tc.skipped)
		}
		for i := 1; i < len(p.Fire); i++ {
			if p.Fire[i].Sub(p.Fire[i-1]) != time.Second {
				t.Errorf("%s: gap in fires at %d", tc.name, i)
			}
		}
	}
}

func TestPlanPassNothingDue(t *testing.T) {
	s := mustParse(t, "@every 10s", "")
	p := PlanPass(s, time.UnixMilli(0), time.UnixMilli(10_000), time.UnixMilli(19_999), Policy{Grace: time.Second})
	if len(p.Fire) != 0 || p.Skipped != 0 || !p.Last.IsZero() {
		t.Errorf("plan %+v, want nothing", p)
	}
}

func TestPlanPassAllLateSkip(t *testing.T) {
	s := mustParse(t, "@every 1s", "")
	p := PlanPass(s, time.UnixMilli(0), time.UnixMilli(0), time.UnixMilli(100_000), Policy{Misfire: Skip})
	if len(p.Fire) != 1 || p.Skipped != 99 || p.Last.UnixMilli() != 100_000 {
		t.Errorf("plan: %d fires, %d skipped, last %d", len(p.Fire), p.Skipped, p.Last.UnixMilli())
	}
}

func TestPlanPassBounds(t *testing.T) {
	s := mustParse(t, "@every 1s", "")
	p := PlanPass(s, time.UnixMilli(0), time.UnixMilli(0), time.UnixMilli(500_000), Policy{Misfire: CatchUp, CatchUpMax: 1000, Grace: time.Hour})
	if len(p.Fire) != MaxFirePerPass || p.Last.UnixMilli() != MaxFirePerPass*1000 || p.Skipped != 0 {
		t.Errorf("plan: %d fires, last %d, skipped %d", len(p.Fire), p.Last.UnixMilli(), p.Skipped)
	}
	p = PlanPass(s, time.UnixMilli(0), time.UnixMilli(0), time.UnixMilli((maxScan+10)*1000), Policy{Misfire: FireOnce})
	if len(p.Fire) != 0 || p.Skipped != maxScan || p.Last.UnixMilli() != maxScan*1000 {
		t.Errorf("long backlog: %d fires, %d skipped, last %d", len(p.Fire), p.Skipped, p.Last.UnixMilli())
	}
}
