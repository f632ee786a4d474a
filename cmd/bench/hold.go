package main

import (
	"context"
	"time"
)

// backlogHold keeps a capped load's backlog at a target by topping up its
// allowance, and records the lowest backlog it saw. The scheduled workload
// uses it so its messages come due among a full backlog however fast the
// cluster drains one: without it a cluster that drains faster than the
// window lasts would be measured idle for the window's end.
type backlogHold struct {
	done chan struct{}
	low  int64 // written by the holding goroutine only; read after done
}

// holdBacklog starts holding l's backlog (acknowledged sends not yet
// processed) at target until ctx ends. Sends in flight are not counted, so
// the backlog may overshoot by up to the producers' window; the next tick
// corrects it.
func holdBacklog(ctx context.Context, l *load, target int, every time.Duration) *backlogHold {
	h := &backlogHold{done: make(chan struct{}), low: int64(target)}
	go func() {
		defer close(h.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			// A delivery can be booked before its send's answer, so the
			// difference can dip below zero for a moment.
			backlog := max(int64(l.enqueued.Load())-int64(l.processed.Load()), 0)
			h.low = min(h.low, backlog)
			if want := int64(target) - backlog - max(l.limit.Load(), 0); want > 0 {
				l.topUp(int(want))
			}
		}
	}()
	return h
}

// lowest waits for the hold to end (its ctx) and returns the lowest
// backlog seen.
func (h *backlogHold) lowest() int64 {
	<-h.done
	return h.low
}
