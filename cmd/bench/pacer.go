package main

import (
	"context"
	"sync"
	"time"
)

// pacer spaces sends to a total rate shared by every producer goroutine.
// A nil pacer does not limit.
type pacer struct {
	mu   sync.Mutex
	per  time.Duration // time per message
	next time.Time
}

func newPacer(rate float64) *pacer {
	if rate <= 0 {
		return nil
	}
	return &pacer{per: time.Duration(float64(time.Second) / rate)}
}

// wait blocks until n more messages may go.
func (p *pacer) wait(ctx context.Context, n int) error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	now := time.Now()
	// A short burst is allowed after a stall, not a catch-up of the whole
	// stall: that would turn the rate cap into a flood.
	if floor := now.Add(-50 * time.Millisecond); p.next.Before(floor) {
		p.next = floor
	}
	at := p.next
	p.next = p.next.Add(time.Duration(n) * p.per)
	p.mu.Unlock()
	if d := time.Until(at); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}
