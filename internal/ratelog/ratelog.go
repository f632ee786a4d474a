// Package ratelog bounds how often a repeated event is logged: a flood of
// refused connections must not become a flood of log lines, and the line
// that is written says how many it stands for.
package ratelog

import (
	"sync"
	"time"
)

// Limiter lets one event through per interval. The zero value lets every
// event through. Safe for concurrent use.
type Limiter struct {
	every time.Duration

	mu      sync.Mutex
	next    time.Time // first instant the next event may be logged
	skipped int       // events not logged since the last one that was
}

// New returns a Limiter that lets at most one event through per every.
func New(every time.Duration) *Limiter { return &Limiter{every: every} }

// Allow reports whether the event at now is to be logged, and if so how
// many events were not logged since the last one that was.
func (l *Limiter) Allow(now time.Time) (ok bool, skipped int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Before(l.next) {
		l.skipped++
		return false, 0
	}
	skipped, l.skipped = l.skipped, 0
	l.next = now.Add(l.every)
	return true, skipped
}
