package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/client/clienttest"
)

// fakeClock is a breakers clock the test moves by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time           { return c.t }
func (c *fakeClock) add(d time.Duration)      { c.t = c.t.Add(d) }
func newFakeClock() *fakeClock                { return &fakeClock{t: time.Unix(1_000_000, 0)} }
func (c *fakeClock) String() string           { return c.t.String() }
func transition(from, to BreakerState) string { return fmt.Sprintf("%s>%s", from, to) }

func TestBreakerOpensProbesAndCloses(t *testing.T) {
	clk := newFakeClock()
	var changes []string
	b := newBreakers(BreakerOptions{Failures: 3, CoolDown: 10 * time.Second}, func(typ string, from, to BreakerState) {
		changes = append(changes, typ+":"+transition(from, to))
	})
	b.now = clk.now
	mustRun := func(step string, wantProbe bool) {
		t.Helper()
		run, probe, _ := b.admit("email")
		if !run || probe != wantProbe {
			t.Fatalf("%s: admit = run %v probe %v, want run with probe %v", step, run, probe, wantProbe)
		}
	}
	mustRefuse := func(step string, wantWait time.Duration) {
		t.Helper()
		run, _, wait := b.admit("email")
		if run || wait != wantWait {
			t.Fatalf("%s: admit = run %v wait %v, want refused for %v", step, run, wait, wantWait)
		}
	}

	// Two failures, a success, two more: never three in a row.
	for _, v := range []verdict{failed, failed, succeeded, failed, failed} {
		mustRun("closed", false)
		b.done("email", false, v)
	}
	if len(changes) != 0 {
		t.Fatalf("changes %v before three consecutive failures", changes)
	}
	mustRun("closed", false)
	b.done("email", false, failed) // the third in a row
	if got := b.states(); got["email"] != BreakerOpen {
		t.Fatalf("states %v after three failures", got)
	}
	mustRefuse("open", 10*time.Second)
	clk.add(4 * time.Second)
	mustRefuse("open", 6*time.Second)
	if run, _, _ := b.admit("sms"); !run {
		t.Fatal("another type's jobs are refused")
	}
	b.done("email", false, succeeded) // admitted before it opened: moves nothing
	mustRefuse("still open", 6*time.Second)

	clk.add(6 * time.Second)
	mustRun("cool-down over", true)
	mustRefuse("probe running", 10*time.Second)
	b.done("email", true, failed)
	mustRefuse("reopened", 10*time.Second)

	clk.add(10 * time.Second)
	mustRun("second probe", true)
	b.done("email", true, neutral) // says nothing: the next job probes
	mustRun("third probe", true)
	b.done("email", true, succeeded)
	mustRun("closed again", false)
	if got := b.states(); len(got) != 0 {
		t.Fatalf("states %v after a successful probe", got)
	}
	want := []string{
		"email:closed>open", "email:open>half_open", "email:half_open>open",
		"email:open>half_open", "email:half_open>closed",
	}
	if strings.Join(changes, " ") != strings.Join(want, " ") {
		t.Fatalf("changes\n %v\nwant\n %v", changes, want)
	}
}

func TestBreakerOffByDefault(t *testing.T) {
	b := newBreakers(BreakerOptions{}, nil)
	for range 100 {
		b.done("x", false, failed)
	}
	if run, _, _ := b.admit("x"); !run {
		t.Fatal("a worker without a breaker refused a job")
	}
}

func TestVerdicts(t *testing.T) {
	for _, c := range []struct {
		err  error
		want verdict
	}{
		{nil, succeeded},
		{errors.New("boom"), failed},
		{Retry(time.Second, nil), failed},
		{&PanicError{Value: "x"}, failed},
		{&timeoutError{after: time.Second}, failed},
		{Poison(nil), neutral},
		{Snooze(time.Second), neutral},
	} {
		if got := verdictOf(c.err); got != c.want {
			t.Errorf("verdictOf(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// With the circuit of "bad" open, its jobs go back unrun with the
// cool-down as their delay and their receive given back, while "good"
// jobs still run; the state shows in the hook and in Breakers.
func TestBreakerHandsBackJobsOfAnOpenType(t *testing.T) {
	f := newFixtureWith(t, client.QueueOptions{BackoffBase: time.Hour, MaxReceives: 1})
	f.mustSend(t, 4, client.Type("bad"))
	var mu sync.Mutex
	var changes []string
	settled, hooks := outcomeLog()
	hooks.BreakerChanged = func(typ string, from, to BreakerState) {
		mu.Lock()
		defer mu.Unlock()
		changes = append(changes, typ+":"+transition(from, to))
	}
	w := mustNew(t, f.c, "q", fast(Options{Concurrency: 1, Breaker: BreakerOptions{Failures: 2, CoolDown: time.Hour}, Hooks: hooks}))
	w.Register("bad", func(context.Context, *Message) error { return errors.New("downstream is down") })
	w.Register("good", func(context.Context, *Message) error { return nil })
	stop := start(t, w)
	var got []Outcome
	for range 4 {
		got = append(got, nextSettlement(t, settled).Outcome)
	}
	f.mustSend(t, 1, client.Type("good"))
	if s := nextSettlement(t, settled); s.Outcome != Acked {
		t.Fatalf("a good job with bad's circuit open: %+v", s)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if fmt.Sprint(got) != fmt.Sprint([]Outcome{Nacked, Nacked, CircuitOpen, CircuitOpen}) {
		t.Fatalf("outcomes %v, want two nacks then two hand-backs", got)
	}
	sn := f.s.Calls("Snooze")
	if len(sn) != 2 {
		t.Fatalf("snoozes %+v, want 2", sn)
	}
	for _, c := range sn {
		if c.Delay < 59*time.Minute || c.Delay > time.Hour || !strings.Contains(c.Error, `circuit open for message type "bad"`) {
			t.Fatalf("hand-back %+v, want the cool-down's delay and the reason", c)
		}
	}
	if f.s.Count("q", clienttest.Delayed) != 2 || f.s.Count("q", clienttest.Dead) != 2 {
		t.Fatalf("want the 2 handed-back jobs delayed (not dead, on their only receive) and the 2 failed ones dead")
	}
	if st := w.Breakers(); len(st) != 1 || st["bad"] != BreakerOpen {
		t.Fatalf("Breakers() = %v", st)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(changes) != 1 || changes[0] != "bad:closed>open" {
		t.Fatalf("breaker changes %v", changes)
	}
}
