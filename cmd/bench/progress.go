package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// progress prints a live status line on stderr: rewritten in place on a
// terminal, one line every 5 s otherwise (logs stay readable), or every
// `every` when that is set.
type progress struct {
	wg   sync.WaitGroup
	stop context.CancelFunc
}

func startProgress(ctx context.Context, w io.Writer, quiet bool, every time.Duration, line func(elapsed time.Duration) string) *progress {
	ctx, cancel := context.WithCancel(ctx)
	p := &progress{stop: cancel}
	if quiet {
		return p
	}
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil {
			tty = st.Mode()&os.ModeCharDevice != 0
		}
	}
	switch {
	case every > 0:
	case tty:
		every = time.Second
	default:
		every = 5 * time.Second
	}
	start := time.Now()
	p.wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				if tty {
					fmt.Fprint(w, "\r\033[K")
				}
				return
			case <-t.C:
				if tty {
					fmt.Fprintf(w, "\r\033[K%s", line(time.Since(start)))
				} else {
					fmt.Fprintln(w, line(time.Since(start)))
				}
			}
		}
	})
	return p
}

func (p *progress) done() {
	p.stop()
	p.wg.Wait()
}

// rateLine formats the usual counters with per-second rates since the last
// call.
type rateLine struct {
	mu       sync.Mutex
	last     time.Time
	lastEnq  uint64
	lastProc uint64
}

func (r *rateLine) format(phase string, elapsed time.Duration, enq, proc uint64) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	d := now.Sub(r.last).Seconds()
	var er, pr float64
	if !r.last.IsZero() && d > 0 {
		er, pr = float64(enq-r.lastEnq)/d, float64(proc-r.lastProc)/d
	}
	r.last, r.lastEnq, r.lastProc = now, enq, proc
	return fmt.Sprintf("[%s %5.0fs] enqueued %d (%.0f/s)  processed %d (%.0f/s)  backlog %d",
		phase, elapsed.Seconds(), enq, er, proc, pr, int64(enq)-int64(proc))
}

// formatFan is format for a topic with copies subscriptions: publishes,
// deliveries (acked copies) and the copies still to deliver.
func (r *rateLine) formatFan(phase string, elapsed time.Duration, pub, deliv uint64, copies int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	d := now.Sub(r.last).Seconds()
	var pr, dr float64
	if !r.last.IsZero() && d > 0 {
		pr, dr = float64(pub-r.lastEnq)/d, float64(deliv-r.lastProc)/d
	}
	r.last, r.lastEnq, r.lastProc = now, pub, deliv
	return fmt.Sprintf("[%s %5.0fs] published %d (%.0f/s)  deliveries %d (%.0f/s)  backlog %d copies",
		phase, elapsed.Seconds(), pub, pr, deliv, dr, int64(pub)*int64(copies)-int64(deliv))
}
