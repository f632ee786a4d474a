package cron

import (
	"testing"
	"time"
)

func at(t *testing.T, s string, loc *time.Location) time.Time {
	t.Helper()
	v, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestNext(t *testing.T) {
	berlin, _ := time.LoadLocation("Europe/Berlin")
	ny, _ := time.LoadLocation("America/New_York")
	for _, tc := range []struct {
		expr, zone  string
		loc         *time.Location
		after, want string
	}{
		{"* * * * *", "", time.UTC, "2026-01-01 00:00", "2026-01-01 00:01"},
		{"*/15 * * * *", "", time.UTC, "2026-01-01 00:14", "2026-01-01 00:15"},
		{"0 9 * * mon", "", time.UTC, "2026-11-28 10:00", "2026-11-30 09:00"}, // a Saturday
		{"0 0 1 * *", "", time.UTC, "2026-12-15 00:00", "2027-01-01 00:00"},
		{"0 0 29 2 *", "", time.UTC, "2026-03-01 00:00", "2028-02-29 00:00"},
		{"0 0 31 * *", "", time.UTC, "2026-04-01 00:00", "2026-05-31 00:00"},
		// Both day fields restricted: either matches (the 13th or a Friday).
		{"0 0 13 * fri", "", time.UTC, "2026-11-14 00:00", "2026-11-20 00:00"},
		{"0 0 13 * fri", "", time.UTC, "2026-12-05 00:00", "2026-12-11 00:00"},
		{"0 0 13 * fri", "", time.UTC, "2026-12-11 00:00", "2026-12-13 00:00"},
		// Zones: 09:00 in Berlin.
		{"0 9 * * *", "Europe/Berlin", berlin, "2026-06-01 09:00", "2026-06-02 09:00"},
		// Spring forward in New York (2026-03-08 02:00 -> 03:00): 02:30
		// does not exist and fires at 03:30.
		{"30 2 * * *", "America/New_York", ny, "2026-03-07 03:00", "2026-03-08 03:30"},
	} {
		s := mustParse(t, tc.expr, tc.zone)
		got := s.Next(time.Time{}, at(t, tc.after, tc.loc))
		if want := at(t, tc.want, tc.loc); !got.Equal(want) {
			t.Errorf("%q after %s: got %s, want %s", tc.expr, tc.after, got.In(tc.loc), want)
		}
	}
	if got := mustParse(t, "0 0 30 2 *", "").Next(time.Time{}, time.Now()); !got.IsZero() {
		t.Errorf("February 30th fired at %s", got)
	}
}

func TestNextFallBackFiresOnce(t *testing.T) {
	ny, _ := time.LoadLocation("America/New_York")
	s := mustParse(t, "30 1 * * *", "America/New_York")
	// 2026-11-01: 01:30 happens twice (EDT, then EST).
	first := s.Next(time.Time{}, at(t, "2026-11-01 00:00", ny))
	second := s.Next(time.Time{}, first)
	if first.Day() != 1 || second.In(ny).Day() != 2 {
		t.Errorf("fall back: %s then %s, want one fire on Nov 1", first, second.In(ny))
	}
}

func TestNextEvery(t *testing.T) {
	s := mustParse(t, "@every 30s", "")
	anchor := time.UnixMilli(1_000_000)
	for _, tc := range []struct{ after, want int64 }{
		{0, 1_000_000},
		{1_000_000, 1_030_000},
		{1_029_999, 1_030_000},
		{1_030_000, 1_060_000},
	} {
		if got := s.Next(anchor, time.UnixMilli(tc.after)).UnixMilli(); got != tc.want {
			t.Errorf("after %d: got %d, want %d", tc.after, got, tc.want)
		}
	}
}

// TestNextIncreases: successive slots strictly increase and each matches
// the expression, across a year in a zone with daylight saving.
func TestNextIncreases(t *testing.T) {
	s := mustParse(t, "*/7 */5 * * *", "Europe/Berlin")
	prev := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for range 20000 {
		n := s.Next(time.Time{}, prev)
		if !n.After(prev) {
			t.Fatalf("%s after %s", n, prev)
		}
		w := n.In(s.Location)
		if w.Minute()%7 != 0 || (w.Hour()%5 != 0 && w.Hour() != 3) {
			t.Fatalf("%s does not match", w)
		}
		prev = n
	}
}
