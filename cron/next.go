package cron

import "time"

// searchYears bounds the search for a cron expression's next time: an
// expression that never matches (February 30th) has none.
const searchYears = 8

// Next is the first fire time strictly after after, or the zero time if
// there is none within eight years. anchor is the schedule's start, which
// "@every" slots count from (anchor + k*Every).
//
// Cron fields are matched against wall-clock time in the spec's zone: a
// time that a daylight-saving jump skips fires at the same offset after
// the jump (02:30 becomes 03:30), and a wall-clock time that occurs twice
// fires once, at its first occurrence.
func (s *Spec) Next(anchor, after time.Time) time.Time {
	if s.Every > 0 {
		if after.Before(anchor) {
			return anchor
		}
		k := after.Sub(anchor)/s.Every + 1
		return anchor.Add(k * s.Every)
	}
	w := after.In(s.Location)
	y, mo, d := w.Date()
	c := clock{y: y, mo: int(mo), d: d, h: w.Hour(), mi: w.Minute()}
	c.addMinute()
	for c.y <= y+searchYears {
		switch {
		case s.month&(1<<uint(c.mo)) == 0:
			c.nextMonth()
		case !s.dayMatches(c):
			c.nextDay()
		case s.hour&(1<<uint(c.h)) == 0:
			c.nextHour()
		case s.minute&(1<<uint(c.mi)) == 0:
			c.addMinute()
		default:
			t := c.instant(s.Location)
			if t.After(after) {
				return t
			}
			c.addMinute()
		}
	}
	return time.Time{}
}

func (s *Spec) dayMatches(c clock) bool {
	wd := time.Date(c.y, time.Month(c.mo), c.d, 12, 0, 0, 0, time.UTC).Weekday()
	dom := s.dom&(1<<uint(c.d)) != 0
	dow := s.dow&(1<<uint(wd)) != 0
	if !s.domStar && !s.dowStar {
		return dom || dow
	}
	return dom && dow
}

// clock is a wall-clock minute, advanced field by field.
type clock struct{ y, mo, d, h, mi int }

// instant is the time c names in loc. A wall-clock time that a forward
// jump skips is read with the offset before the jump, so it lands after
// the jump by as much as it was into the gap (time.Date leaves the choice
// open).
func (c clock) instant(loc *time.Location) time.Time {
	t := time.Date(c.y, time.Month(c.mo), c.d, c.h, c.mi, 0, 0, loc)
	if w := t.In(loc); w.Hour() == c.h && w.Minute() == c.mi {
		return t
	}
	wall := time.Date(c.y, time.Month(c.mo), c.d, c.h, c.mi, 0, 0, time.UTC)
	_, before := wall.Add(-24 * time.Hour).In(loc).Zone()
	return wall.Add(-time.Duration(before) * time.Second)
}

func (c *clock) addMinute() {
	c.mi++
	if c.mi == 60 {
		c.mi = 0
		c.addHour()
	}
}

func (c *clock) addHour() {
	c.h++
	if c.h == 24 {
		c.h = 0
		c.addDay()
	}
}

func (c *clock) addDay() {
	c.d++
	if c.d > daysIn(c.y, c.mo) {
		c.d = 1
		c.addMonth()
	}
}

func (c *clock) addMonth() {
	c.mo++
	if c.mo == 13 {
		c.mo = 1
		c.y++
	}
}

func (c *clock) nextHour()  { c.mi = 0; c.addHour() }
func (c *clock) nextDay()   { c.mi, c.h = 0, 0; c.addDay() }
func (c *clock) nextMonth() { c.mi, c.h, c.d = 0, 0, 1; c.addMonth() }

func daysIn(y, mo int) int {
	return time.Date(y, time.Month(mo)+1, 0, 0, 0, 0, 0, time.UTC).Day()
}
