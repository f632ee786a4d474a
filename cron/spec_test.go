package cron

import (
	"errors"
	"testing"
	"time"
)

func mustParse(t *testing.T, expr, zone string) *Spec {
	t.Helper()
	s, err := Parse(expr, zone)
	if err != nil {
		t.Fatalf("Parse(%q, %q): %v", expr, zone, err)
	}
	return s
}

func TestParseRejects(t *testing.T) {
	for _, tc := range []struct{ expr, zone string }{
		{"", ""},
		{"* * * *", ""},
		{"* * * * * *", ""},
		{"60 * * * *", ""},
		{"* 24 * * *", ""},
		{"* * 0 * *", ""},
		{"* * 32 * *", ""},
		{"* * * 13 *", ""},
		{"* * * * 8", ""},
		{"5-1 * * * *", ""},
		{"*/0 * * * *", ""},
		{"*/61 * * * *", ""},
		{"a * * * *", ""},
		{"1,,2 * * * *", ""},
		{"@every 500ms", ""},
		{"@every 1500ms", ""},
		{"@every 400d", ""},
		{"@every soon", ""},
		{"@fortnightly", ""},
		{"* * * * *", "Mars/Olympus"},
		{"* * * * *", "Local"},
	} {
		if _, err := Parse(tc.expr, tc.zone); !errors.Is(err, ErrSpec) {
			t.Errorf("Parse(%q, %q) = %v, want ErrSpec", tc.expr, tc.zone, err)
		}
	}
}

func TestParseFields(t *testing.T) {
	s := mustParse(t, "0,30 9-17/2 * jan-MAR mon-fri", "")
	if s.minute != 1|1<<30 {
		t.Errorf("minute %b", s.minute)
	}
	if s.hour != 1<<9|1<<11|1<<13|1<<15|1<<17 {
		t.Errorf("hour %b", s.hour)
	}
	if s.month != 1<<1|1<<2|1<<3 {
		t.Errorf("month %b", s.month)
	}
	if s.dow != 0b111110 || s.dowStar || !s.domStar {
		t.Errorf("dow %b star %v dom star %v", s.dow, s.dowStar, s.domStar)
	}
	if s7 := mustParse(t, "0 0 * * 7", ""); s7.dow != 1 {
		t.Errorf("7 is not Sunday: %b", s7.dow)
	}
	if st := mustParse(t, "5/20 * * * *", ""); st.minute != 1<<5|1<<25|1<<45 {
		t.Errorf("5/20: %b", st.minute)
	}
	if e := mustParse(t, "@every 30s", "Europe/Berlin"); e.Every != 30*time.Second || e.Location.String() != "Europe/Berlin" {
		t.Errorf("@every: %+v", e)
	}
}
