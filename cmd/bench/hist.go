package main

import (
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// latency is a concurrency-safe HDR histogram of durations in microseconds,
// 1 us to 10 min at 3 significant digits. Beside the run's histogram it
// keeps one for the current progress interval, so a live line can show the
// tail as it moves: a run's p99 alone cannot tell a steady tail from a few
// bad seconds (a snapshot, a GC cycle, an election).
type latency struct {
	mu  sync.Mutex
	h   *hdrhistogram.Histogram
	win *hdrhistogram.Histogram
}

func newLatency() *latency {
	top := int64(10 * time.Minute / time.Microsecond)
	return &latency{h: hdrhistogram.New(1, top, 3), win: hdrhistogram.New(1, top, 3)}
}

func (l *latency) record(d time.Duration) {
	l.recordN(d, 1)
}

// recordN books n events of duration d (one batch call timed once for its
// n messages).
func (l *latency) recordN(d time.Duration, n int) {
	us := max(d.Microseconds(), 1)
	l.mu.Lock()
	defer l.mu.Unlock()
	// Values above the range are clamped rather than dropped: a report that
	// silently loses its worst samples would flatter the tail.
	if us > l.h.HighestTrackableValue() {
		us = l.h.HighestTrackableValue()
	}
	_ = l.h.RecordValues(us, int64(n))
	_ = l.win.RecordValues(us, int64(n))
}

// interval returns the p99 (ms) and count of what was booked since the
// previous call, and starts a new interval.
func (l *latency) interval() (p99 float64, n int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p99, n = float64(l.win.ValueAtQuantile(99))/1000, l.win.TotalCount()
	l.win.Reset()
	return p99, n
}

// summary is a histogram as the report prints it, in milliseconds.
type summary struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Max   float64 `json:"max_ms"`
}

func (l *latency) summary() summary {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.h.TotalCount() == 0 {
		return summary{}
	}
	ms := func(us int64) float64 { return float64(us) / 1000 }
	return summary{
		Count: l.h.TotalCount(),
		P50:   ms(l.h.ValueAtQuantile(50)),
		P99:   ms(l.h.ValueAtQuantile(99)),
		P999:  ms(l.h.ValueAtQuantile(99.9)),
		Max:   ms(l.h.Max()),
	}
}

// reset forgets everything booked: a load that runs on through two
// measured windows starts the second one empty.
func (l *latency) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.h.Reset()
	l.win.Reset()
}
