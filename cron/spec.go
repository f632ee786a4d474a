package cron

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	// Embedded zone data: every node resolves a schedule's zone alike,
	// whatever its host has installed.
	_ "time/tzdata"
)

// Limits of a schedule's expression.
const (
	// MinEvery is the shortest "@every" interval.
	MinEvery = time.Second
	// MaxEvery is the longest "@every" interval.
	MaxEvery = 366 * 24 * time.Hour
	// MaxSpecLen bounds the expression's text.
	MaxSpecLen = 256
)

// ErrSpec is matched (errors.Is) by every parse error.
var ErrSpec = errors.New("cron: bad schedule")

// Spec is a parsed schedule: either an interval (Every > 0), anchored at
// the schedule's creation, or a set of allowed minutes, hours, days of
// the month, months and weekdays, read in Location.
type Spec struct {
	Every time.Duration
	// Bit sets: minute 0-59, hour 0-23, dom 1-31, month 1-12, dow 0-6
	// (Sunday 0).
	minute, hour, dom, month, dow uint64
	// domStar/dowStar: the field was "*" (or "*/n"). As in Vixie cron,
	// when both day fields are restricted a day matching either fires.
	domStar, dowStar bool
	Location         *time.Location
}

var aliases = map[string]string{
	"@yearly":   "0 0 1 1 *",
	"@annually": "0 0 1 1 *",
	"@monthly":  "0 0 1 * *",
	"@weekly":   "0 0 * * 0",
	"@daily":    "0 0 * * *",
	"@midnight": "0 0 * * *",
	"@hourly":   "0 * * * *",
}

// Parse parses expr in the time zone zone (an IANA name; "" or "UTC"
// means UTC).
func Parse(expr, zone string) (*Spec, error) {
	loc, err := LoadZone(zone)
	if err != nil {
		return nil, err
	}
	expr = strings.TrimSpace(expr)
	if expr == "" {
		return nil, fmt.Errorf("%w: empty expression", ErrSpec)
	}
	if len(expr) > MaxSpecLen {
		return nil, fmt.Errorf("%w: expression is %d bytes, limit %d", ErrSpec, len(expr), MaxSpecLen)
	}
	if rest, ok := strings.CutPrefix(expr, "@every "); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil {
			return nil, fmt.Errorf("%w: @every: %v", ErrSpec, err)
		}
		if d < MinEvery || d > MaxEvery || d%time.Second != 0 {
			return nil, fmt.Errorf("%w: @every %s: want whole seconds from %s to %s", ErrSpec, d, MinEvery, MaxEvery)
		}
		return &Spec{Every: d, Location: loc}, nil
	}
	if a, ok := aliases[strings.ToLower(expr)]; ok {
		expr = a
	} else if strings.HasPrefix(expr, "@") {
		return nil, fmt.Errorf("%w: unknown %q (want @every D, @yearly, @monthly, @weekly, @daily, @midnight or @hourly)", ErrSpec, expr)
	}
	f := strings.Fields(expr)
	if len(f) != 5 {
		return nil, fmt.Errorf("%w: %q has %d fields, want 5 (minute hour day-of-month month day-of-week)", ErrSpec, expr, len(f))
	}
	s := &Spec{Location: loc}
	parts := []struct {
		name     string
		set      *uint64
		lo, hi   int
		names    []string
		star     *bool
		sunday7  bool
		namebase int
	}{
		{name: "minute", set: &s.minute, lo: 0, hi: 59},
		{name: "hour", set: &s.hour, lo: 0, hi: 23},
		{name: "day of month", set: &s.dom, lo: 1, hi: 31, star: &s.domStar},
		{name: "month", set: &s.month, lo: 1, hi: 12, names: monthNames, namebase: 1},
		{name: "day of week", set: &s.dow, lo: 0, hi: 6, names: dayNames, star: &s.dowStar, sunday7: true},
	}
	for i, p := range parts {
		hi := p.hi
		if p.sunday7 {
			hi = 7
		}
		set, star, err := parseField(f[i], p.lo, hi, p.names, p.namebase)
		if err != nil {
			return nil, fmt.Errorf("%w: %s field %q: %v", ErrSpec, p.name, f[i], err)
		}
		if p.sunday7 && set&(1<<7) != 0 {
			set = set&^(1<<7) | 1 // 7 is Sunday too
		}
		*p.set = set
		if p.star != nil {
			*p.star = star
		}
	}
	return s, nil
}

var (
	monthNames = []string{"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"}
	dayNames   = []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}
)

// LoadZone resolves an IANA time zone name; "" means UTC.
func LoadZone(zone string) (*time.Location, error) {
	if zone == "" {
		return time.UTC, nil
	}
	loc, err := time.LoadLocation(zone)
	if err != nil || zone == "Local" {
		return nil, fmt.Errorf("%w: unknown time zone %q (want an IANA name such as Europe/Berlin)", ErrSpec, zone)
	}
	return loc, nil
}

// parseField parses one comma-separated field into a bit set; star
// reports a field that starts with "*".
func parseField(field string, lo, hi int, names []string, namebase int) (set uint64, star bool, err error) {
	if field == "" {
		return 0, false, errors.New("empty")
	}
	for _, item := range strings.Split(field, ",") {
		rng, stepText, hasStep := strings.Cut(item, "/")
		step := 1
		if hasStep {
			if step, err = strconv.Atoi(stepText); err != nil || step < 1 || step > hi-lo+1 {
				return 0, false, fmt.Errorf("bad step %q", stepText)
			}
		}
		var from, to int
		switch {
		case rng == "*":
			from, to = lo, hi
			if hi == 7 { // day of week: * is 0-6 (7 is Sunday again)
				to = 6
			}
		default:
			a, b, isRange := strings.Cut(rng, "-")
			if from, err = fieldValue(a, lo, hi, names, namebase); err != nil {
				return 0, false, err
			}
			to = from
			if isRange {
				if to, err = fieldValue(b, lo, hi, names, namebase); err != nil {
					return 0, false, err
				}
				if to < from {
					return 0, false, fmt.Errorf("range %q runs backwards", rng)
				}
			} else if hasStep {
				to = hi // "a/n" means a, a+n, ... up to the field's end
				if hi == 7 {
					to = 6
				}
			}
		}
		for v := from; v <= to; v += step {
			set |= 1 << uint(v)
		}
	}
	return set, strings.HasPrefix(field, "*"), nil
}

func fieldValue(text string, lo, hi int, names []string, namebase int) (int, error) {
	for i, n := range names {
		if strings.EqualFold(text, n) {
			return i + namebase, nil
		}
	}
	v, err := strconv.Atoi(text)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", text)
	}
	if v < lo || v > hi {
		return 0, fmt.Errorf("%d is outside %d-%d", v, lo, hi)
	}
	return v, nil
}
