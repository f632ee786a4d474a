package worker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/client/clienttest"
)

// The worker's metrics land on the registry the application passes: a
// handler's duration by type, the handlers running, and each outcome;
// types without a handler of their own share the _other label.
func TestWorkerMetrics(t *testing.T) {
	f := newFixtureWith(t, client.QueueOptions{BackoffBase: time.Minute})
	reg := prometheus.NewRegistry()
	release := make(chan struct{})
	running := make(chan struct{}, 1)
	w := mustNew(t, f.c, "q", fast(Options{Metrics: reg, Concurrency: 1}))
	w.Register("email", func(_ context.Context, m *Message) error {
		if string(m.Body) == "m0" {
			running <- struct{}{}
			<-release
			return nil
		}
		return errors.New("smtp down")
	})
	w.Default(func(context.Context, *Message) error { panic("no parser") })
	f.mustSend(t, 2, client.Type("email")) // m0 acked, m1 nacked
	stop := start(t, w)
	<-running
	if v := testutil.ToFloat64(w.met.active.WithLabelValues("q")); v != 1 {
		t.Fatalf("active handlers %v while one runs, want 1", v)
	}
	close(release)
	for _, id := range []string{"random-type-1", "random-type-2"} {
		f.mustSend(t, 1, client.Type(id))
	}
	outcome := func(typ, o string) float64 {
		return testutil.ToFloat64(w.met.outcomes.WithLabelValues("q", typ, o))
	}
	clienttest.WaitFor(t, "4 outcomes", func() bool {
		return outcome("email", "acked")+outcome("email", "nacked")+outcome(OtherType, "panicked") == 4
	})
	_ = stop()
	if outcome("email", "acked") != 1 || outcome("email", "nacked") != 1 || outcome(OtherType, "panicked") != 2 {
		t.Fatalf("outcomes email acked %v nacked %v, _other panicked %v; want 1, 1, 2",
			outcome("email", "acked"), outcome("email", "nacked"), outcome(OtherType, "panicked"))
	}
	if v := testutil.ToFloat64(w.met.active.WithLabelValues("q")); v != 0 {
		t.Fatalf("active handlers %v after the run, want 0", v)
	}
	if n := testutil.CollectAndCount(w.met.handler); n != 2 {
		t.Fatalf("%d handler duration series, want 2 (email, _other): unregistered types must not get their own", n)
	}
	if n, err := testutil.GatherAndCount(reg, "raftq_worker_handler_seconds"); err != nil || n != 2 {
		t.Fatalf("the registry holds %d handler series (%v)", n, err)
	}

	// A second worker on the same registry shares the metrics; a worker
	// without Options.Metrics registers nothing, globally or elsewhere.
	w2 := mustNew(t, f.c, "q", Options{Metrics: reg})
	if w2.met.outcomes != w.met.outcomes {
		t.Fatal("a second worker on the registry did not share its metrics")
	}
	if w3 := mustNew(t, f.c, "q", Options{}); w3.met != nil {
		t.Fatal("a worker without Options.Metrics has metrics")
	}
	if n, _ := testutil.GatherAndCount(prometheus.DefaultGatherer, "raftq_worker_outcomes_total"); n != 0 {
		t.Fatal("worker metrics reached the global registry")
	}
}
