package clockskew

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

func TestMeasureCentresTheReadingOnTheRoundTrip(t *testing.T) {
	cases := []struct {
		name          string
		remote, local time.Time
		rtt           time.Duration
		want, unc     time.Duration
	}{
		// The peer answered mid-way: its reading belongs to local-rtt/2.
		{"same clock", t0.Add(-5 * time.Millisecond), t0, 10 * time.Millisecond, 0, 5 * time.Millisecond},
		{"peer 10 min ahead", t0.Add(10*time.Minute - time.Millisecond), t0, 2 * time.Millisecond, 10 * time.Minute, time.Millisecond},
		{"peer 400 ms behind", t0.Add(-400*time.Millisecond - time.Millisecond), t0, 2 * time.Millisecond, -400 * time.Millisecond, time.Millisecond},
		{"negative rtt is treated as 0", t0, t0, -time.Second, 0, 0},
	}
	for _, tc := range cases {
		s := Measure(tc.remote, tc.local, tc.rtt, t0)
		if s.Offset != tc.want || s.Uncertainty != tc.unc {
			t.Errorf("%s: Measure = %v ± %v, want %v ± %v", tc.name, s.Offset, s.Uncertainty, tc.want, tc.unc)
		}
	}
}

func TestEstimatorTakesTheMedianOfTheRecentWindow(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name     string
		offsets  []time.Duration // oldest first, one per second
		window   int
		wantOff  time.Duration
		wantSamp int
	}{
		{"one sample", []time.Duration{7 * ms}, 5, 7 * ms, 1},
		{"one outlier does not move it", []time.Duration{1 * ms, 2 * ms, 900 * ms, 3 * ms, 2 * ms}, 5, 2 * ms, 5},
		// After a clock step the window follows once half of it has seen
		// the new offset.
		{"step not yet followed", []time.Duration{0, 0, 0, 0, 0, 600 * ms, 600 * ms}, 5, 0, 5},
		{"step followed", []time.Duration{0, 0, 0, 0, 0, 600 * ms, 600 * ms, 600 * ms}, 5, 600 * ms, 5},
		{"even count takes the lower middle", []time.Duration{10 * ms, 20 * ms, 30 * ms, 40 * ms}, 5, 20 * ms, 4},
	}
	for _, tc := range cases {
		e := NewEstimator(tc.window, time.Minute)
		for i, o := range tc.offsets {
			e.Add("p", Sample{Offset: o, Uncertainty: ms, At: t0.Add(time.Duration(i) * time.Second)})
		}
		got, ok := e.Estimates(t0.Add(time.Duration(len(tc.offsets)) * time.Second))["p"]
		if !ok || got.Offset != tc.wantOff || got.Samples != tc.wantSamp || got.Uncertainty != ms {
			t.Errorf("%s: estimate = %+v (ok %v), want offset %v from %d samples", tc.name, got, ok, tc.wantOff, tc.wantSamp)
		}
	}
}

func TestEstimatorForgetsPeersThatStoppedAnswering(t *testing.T) {
	e := NewEstimator(5, 10*time.Second)
	e.Add("old", Sample{Offset: time.Second, At: t0})
	e.Add("live", Sample{Offset: time.Second, At: t0})
	e.Add("live", Sample{Offset: 3 * time.Second, At: t0.Add(9 * time.Second)})
	got := e.Estimates(t0.Add(15 * time.Second))
	if _, ok := got["old"]; ok {
		t.Errorf("a peer last heard 15 s ago (ttl 10 s) still has an estimate: %+v", got["old"])
	}
	// Only the fresh sample of "live" counts.
	if l, ok := got["live"]; !ok || l.Offset != 3*time.Second || l.Samples != 1 {
		t.Errorf("live = %+v (ok %v), want 3s from its one fresh sample", l, ok)
	}
}

func TestClockPayloadRoundTripsAndRejectsOthers(t *testing.T) {
	now := t0.Add(123456789 * time.Nanosecond)
	got, err := DecodeClock(EncodeClock(now))
	if err != nil || !got.Equal(now) {
		t.Fatalf("DecodeClock(EncodeClock(%v)) = %v, %v", now, got, err)
	}
	for _, b := range [][]byte{nil, {}, {1, 2, 3}, append([]byte{2}, EncodeClock(now)[1:]...), append(EncodeClock(now), 0)} {
		if _, err := DecodeClock(b); err != ErrNoClock {
			t.Errorf("DecodeClock(%v) err = %v, want ErrNoClock", b, err)
		}
	}
}
