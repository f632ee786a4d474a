package main

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftq/raftq/internal/testcluster"
)

// TestScheduledAgainstCluster runs the scheduled workload, shrunk, against
// real node processes. It fails on correctness only: a scheduled message
// lost or delivered before it was due, a churn over its cap (a loaded
// machine only slows it), or no churn at all. The figures (lateness, how
// low the backlog fell while the refill kept up) are reported, not
// judged: a loaded 2-core machine moves them.
func TestScheduledAgainstCluster(t *testing.T) {
	c := testcluster.Start(t, nodeBin, testcluster.Options{})
	for _, tc := range []struct {
		name      string
		churnRate float64
	}{{"full speed", 0}, {"capped", 500}} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"scheduled", "--backlog", "2000", "--scheduled", "40", "--duration", "2s", "--due", "1s",
				"--producers", "2", "--inflight", "4", "--consumers", "2", "--batch", "32", "--drain-timeout", "60s", "--progress-every", "100ms"}
			if tc.churnRate > 0 {
				args = append(args, "--churn-rate", strconv.FormatFloat(tc.churnRate, 'f', -1, 64))
			}
			cfg := mustParse(t, args...)
			cfg.Addrs = c.Addrs()
			if err := cfg.validate(); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			var progress lockedBuffer
			res, err := runScheduled(ctx, cfg, &progress)
			if err != nil {
				t.Fatalf("scheduled: %v (result %+v)", err, res)
			}
			r := res.(*scheduledResult)
			if r.Lost != 0 || r.Early != 0 {
				t.Errorf("lost %d, early %d; want none (%s, last error %q)", r.Lost, r.Early, r.Errors, r.LastError)
			}
			// Every scheduled send whose outcome is known was acknowledged
			// and so must have arrived (Lost); each arrival books lateness.
			if uint64(r.lateness.Count)+r.Unknown < 40 {
				t.Errorf("lateness booked for %d messages and %d sends unknown, want all 40 accounted for", r.lateness.Count, r.Unknown)
			}
			if r.ChurnPerS <= 0 || r.RefillPerS <= 0 {
				t.Errorf("churn %.0f/s, refill %.0f/s: the backlog must be drained and refilled during the window", r.ChurnPerS, r.RefillPerS)
			}
			// The pacer allows a 50 ms burst after a stall; a window of a
			// few seconds stays well inside a fifth over the cap.
			if tc.churnRate > 0 && r.ChurnPerS > tc.churnRate*1.2 {
				t.Errorf("churn %.0f/s over the %.0f/s cap", r.ChurnPerS, tc.churnRate)
			}
			// The live line carries each interval's lateness, so a stall
			// can be placed in time.
			if n := strings.Count(progress.String(), "lateness p99"); n == 0 {
				t.Errorf("no progress line showed lateness:\n%s", progress.String())
			}
			t.Logf("lateness p50/p99 %.1f/%.1f ms; churn %.0f/s, refill %.0f/s, lowest backlog %d of 2000; %d scheduled sends unknown (%s)",
				r.LatenessP50, r.LatenessP99, r.ChurnPerS, r.RefillPerS, r.BacklogLow, r.Unknown, r.Errors)
		})
	}
}

// lockedBuffer is an io.Writer the progress goroutine and the run may
// share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
