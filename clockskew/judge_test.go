package clockskew

import (
	"fmt"
	"testing"
	"time"
)

const ms = time.Millisecond

// view is what node self sees when the members' clocks are off true time
// by clocks (nil entries: alive but not measured yet), each estimate with
// uncertainty unc.
func view(clocks []*time.Duration, self int, unc time.Duration) View {
	v := View{Compared: true, Estimates: map[string]Estimate{}}
	for i, c := range clocks {
		if i == self {
			continue
		}
		p := fmt.Sprintf("n%d", i+1)
		v.Peers = append(v.Peers, p)
		if c != nil {
			v.Estimates[p] = Estimate{Offset: *c - *clocks[self], Uncertainty: unc, Samples: 1}
		}
	}
	return v
}

func d(x time.Duration) *time.Duration { return &x }

func clocks(xs ...time.Duration) []*time.Duration {
	out := make([]*time.Duration, len(xs))
	for i := range xs {
		out[i] = d(xs[i])
	}
	return out
}

func TestJudgeFirstDecisionFollowsTheMedianRule(t *testing.T) {
	cfg := Config{Bound: 500 * ms}
	cases := []struct {
		name   string
		clocks []*time.Duration
		want   []State // per node
	}{
		{"all agree", clocks(0, 1*ms, -2*ms), []State{Within, Within, Within}},
		{"one node 10 min ahead: only it is beyond", clocks(0, 0, 10*time.Minute), []State{Within, Within, Beyond}},
		{"one node 10 min behind", clocks(-10*time.Minute, 0, 0), []State{Beyond, Within, Within}},
		// The case: -400 and +400 ms are each within 500 ms of
		// the median (the good node's clock); 800 ms apart.
		{"opposite skews within the bound", clocks(-400*ms, 0, 400*ms), []State{Within, Within, Within}},
		// Two opposite bad clocks: each is beyond, the good node is not
		// condemned by either.
		{"opposite skews beyond the bound", clocks(-600*ms, 0, 600*ms), []State{Beyond, Within, Beyond}},
		{"opposite skews of 10 min", clocks(-10*time.Minute, 0, 10*time.Minute), []State{Beyond, Within, Beyond}},
		// Two members: neither can tell whose clock is wrong.
		{"two members never condemn", clocks(0, 10*time.Minute), []State{Within, Within}},
		{"alone", clocks(10 * time.Minute), []State{Within}},
		// Four members: beyond only when three clocks (a strict
		// majority) are beyond on one side.
		{"four, one bad", clocks(0, 0, 0, time.Minute), []State{Within, Within, Within, Beyond}},
		{"four, two bad on the same side", clocks(0, 0, time.Minute, time.Minute), []State{Within, Within, Within, Within}},
		{"five, two bad", clocks(0, 0, 0, time.Minute, -time.Minute), []State{Within, Within, Within, Beyond, Beyond}},
	}
	for _, tc := range cases {
		for self, want := range tc.want {
			j := NewJudge(cfg)
			v := j.Step(view(tc.clocks, self, 0), t0)
			if v.State != want || v.Changed != (want != Unchecked) {
				t.Errorf("%s: node %d = %v (changed %v), want %v", tc.name, self+1, v.State, v.Changed, want)
			}
			if v.Members != len(tc.clocks) || v.Measured != len(tc.clocks)-1 {
				t.Errorf("%s: node %d counted %d members, %d measured", tc.name, self+1, v.Members, v.Measured)
			}
		}
	}
}

func TestJudgeOffsetIsOwnClockMinusTheMedian(t *testing.T) {
	cases := []struct {
		clocks []*time.Duration
		self   int
		want   time.Duration
	}{
		{clocks(0, 0, 10*time.Minute), 2, 10 * time.Minute},
		{clocks(0, 0, 10*time.Minute), 0, 0},
		{clocks(-400*ms, 0, 400*ms), 0, -400 * ms},
		{clocks(-400*ms, 0, 400*ms), 2, 400 * ms},
		// Even count: the middle clock nearer our own.
		{clocks(0, 300*ms), 0, 0},
		{clocks(0, 100*ms, 200*ms, 300*ms), 0, -100 * ms},
	}
	for _, tc := range cases {
		v := NewJudge(Config{Bound: 500 * ms}).Step(view(tc.clocks, tc.self, 0), t0)
		if v.Offset != tc.want {
			t.Errorf("clocks %v self %d: offset %v, want %v", deref(tc.clocks), tc.self, v.Offset, tc.want)
		}
	}
}

func deref(cs []*time.Duration) []time.Duration {
	out := make([]time.Duration, len(cs))
	for i, c := range cs {
		if c != nil {
			out[i] = *c
		}
	}
	return out
}

// Until membership is known, or while unmeasured peers could still swing
// the median, the node stays Unchecked (and does not lead).
func TestJudgeStaysUncheckedUntilEnoughPeersAreMeasured(t *testing.T) {
	j := NewJudge(Config{Bound: 500 * ms})
	if v := j.Step(View{}, t0); v.State != Unchecked || v.Changed {
		t.Fatalf("before gossip joined: %+v, want Unchecked", v)
	}
	// Node 3 runs 10 min ahead and has measured one of its two peers:
	// the other could agree with it, so nothing is decided yet.
	half := []*time.Duration{d(0), nil, d(10 * time.Minute)}
	if v := j.Step(view(half, 2, 0), t0); v.State != Unchecked {
		t.Fatalf("one of two peers measured: %v, want Unchecked", v.State)
	}
	full := clocks(0, 0, 10*time.Minute)
	if v := j.Step(view(full, 2, 0), t0); v.State != Beyond || !v.Changed {
		t.Fatalf("both measured: %+v, want Beyond", v)
	}
	// A good node with one peer measured: even if the other were off,
	// no majority can be beyond, so it may lead.
	g := NewJudge(Config{Bound: 500 * ms})
	if v := g.Step(view([]*time.Duration{d(0), d(0), nil}, 0, 0), t0); v.State != Within {
		t.Fatalf("good node, one peer agrees, one unmeasured: %v, want Within", v.State)
	}
}

// Going beyond needs certainty: a peer measured at 520 ms ± 30 ms might be
// within the bound, so it does not condemn a node that was Within.
func TestJudgeNeedsCertaintyToCondemn(t *testing.T) {
	j := NewJudge(Config{Bound: 500 * ms})
	j.Step(view(clocks(0, 0, 0), 2, 0), t0)
	if j.State() != Within {
		t.Fatalf("setup: %v", j.State())
	}
	if v := j.Step(view(clocks(0, 0, 520*ms), 2, 30*ms), t0); v.State != Within {
		t.Errorf("520 ms ± 30 ms: %v, want still Within", v.State)
	}
	if v := j.Step(view(clocks(0, 0, 540*ms), 2, 30*ms), t0); v.State != Beyond || !v.Changed {
		t.Errorf("540 ms ± 30 ms: %+v, want Beyond", v)
	}
}

func TestJudgeRecoversOnlyWellWithinTheBoundAndAfterADwell(t *testing.T) {
	j := NewJudge(Config{Bound: 500 * ms, RecoverBound: 400 * ms, RecoverAfter: 10 * time.Second})
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	steps := []struct {
		sec  int
		skew time.Duration // node 3's clock
		want State
	}{
		{0, 10 * time.Minute, Beyond},
		{1, 450 * ms, Beyond}, // within the bound but not the recovery bound
		{2, 390 * ms, Beyond}, // within: the dwell starts
		{6, 390 * ms, Beyond},
		{7, 450 * ms, Beyond}, // out again: the dwell restarts
		{8, 300 * ms, Beyond},
		{17, 300 * ms, Beyond}, // 9 s
		{18, 300 * ms, Within}, // 10 s
		{19, 450 * ms, Within}, // no flapping back under the bound
		{20, 510 * ms, Beyond},
	}
	for _, s := range steps {
		v := j.Step(view(clocks(0, 0, s.skew), 2, ms), at(s.sec))
		if v.State != s.want {
			t.Fatalf("t=%ds skew %v: %v, want %v", s.sec, s.skew, v.State, s.want)
		}
	}
}

// Recovery counts unmeasured peers against it: with one peer measured
// still 450 ms away and the other not measured (restarting), the median
// could be either, so the node does not come back.
func TestJudgeDoesNotRecoverOnUnmeasuredPeers(t *testing.T) {
	j := NewJudge(Config{Bound: 500 * ms, RecoverAfter: time.Second})
	j.Step(view(clocks(time.Minute, 0, 0), 0, 0), t0)
	if j.State() != Beyond {
		t.Fatalf("setup: %v", j.State())
	}
	part := []*time.Duration{d(0), d(450 * ms), nil}
	for s := range 5 {
		if v := j.Step(view(part, 0, 0), t0.Add(time.Duration(s)*time.Second)); v.State != Beyond {
			t.Fatalf("t=%ds one peer 450 ms away, one unmeasured: %v, want Beyond", s, v.State)
		}
	}
	// Once the second peer is measured and agrees, the median is back.
	for s := 5; s < 7; s++ {
		j.Step(view(clocks(0, 450*ms, 0), 0, 0), t0.Add(time.Duration(s)*time.Second))
	}
	if j.State() != Within {
		t.Fatalf("both peers measured, median clock equal to ours: %v, want Within", j.State())
	}
}

// A node judged beyond by three members does not come back when a good
// peer dies: two members cannot tell whose clock is wrong, so among two
// nothing condemns it, but nothing clears it either. It comes back only
// once as many members as condemned it see its clock within the bound.
func TestJudgeDoesNotRecoverWhenAPeerDies(t *testing.T) {
	j := NewJudge(Config{Bound: 500 * ms, RecoverAfter: time.Second})
	j.Step(view(clocks(0, 0, 10*time.Minute), 2, ms), t0)
	if j.State() != Beyond {
		t.Fatalf("setup: %v", j.State())
	}
	twoLeft := View{Compared: true, Peers: []string{"n1"}, Estimates: map[string]Estimate{"n1": {Offset: -10 * time.Minute, Uncertainty: ms, Samples: 1}}}
	for s := 1; s <= 30; s++ {
		if v := j.Step(twoLeft, t0.Add(time.Duration(s)*time.Second)); v.State != Beyond {
			t.Fatalf("t=%ds, n2 dead, n3 still 10 min ahead of n1: %v, want Beyond", s, v.State)
		}
	}
	// The clock is fixed and all three members are back: it recovers
	// after the dwell.
	for s := 31; s <= 33; s++ {
		j.Step(view(clocks(0, 0, 0), 2, ms), t0.Add(time.Duration(s)*time.Second))
	}
	if j.State() != Within {
		t.Fatalf("clock fixed, three members: %v, want Within", j.State())
	}
}
