package clockskew

import (
	"slices"
	"time"
)

// State is what the clock check allows this node.
type State int

const (
	// Unchecked: not yet compared with enough peers to know. The node
	// does not lead (a node started with a wrong clock must not win the
	// first election before it has measured anyone).
	Unchecked State = iota
	// Within the bound: the node may lead.
	Within
	// Beyond the bound: the node does not lead until its clock is back.
	Beyond
)

func (s State) String() string {
	switch s {
	case Unchecked:
		return "unchecked"
	case Within:
		return "within"
	case Beyond:
		return "beyond"
	}
	return "unknown"
}

// Config tunes a Judge.
type Config struct {
	// Bound is the largest offset of this node's clock from the median
	// clock of the live members that still lets it lead.
	Bound time.Duration
	// RecoverBound is the offset a node judged Beyond must be back within
	// (with certainty) to lead again; default 3/4 of Bound, so a clock
	// hovering at the bound does not flap.
	RecoverBound time.Duration
	// RecoverAfter is how long it must stay within RecoverBound first;
	// default 10 s.
	RecoverAfter time.Duration
}

// View is what the judge sees at one step.
type View struct {
	// Compared: membership is known (gossip has joined, or the node has
	// nobody to join). Until then an empty peer list means "not heard
	// yet", not "alone".
	Compared bool
	// Peers are the other live members.
	Peers []string
	// Estimates holds the peers measured recently (others are unknown).
	Estimates map[string]Estimate
}

// Verdict is the outcome of one step.
type Verdict struct {
	State   State
	Changed bool // State differs from the previous step's
	// Offset is this node's clock minus the median clock of itself and
	// the measured peers (0 when it measured nobody): what the bound is
	// judged on.
	Offset time.Duration
	// Members counts this node and its live peers; Measured the peers
	// with an estimate.
	Members, Measured int
}

// Judge decides, step by step, whether this node's clock is within the
// bound. It is the median rule: with its own clock counted as offset 0
// and each measured peer at its estimated offset, the node is beyond the
// bound when the median clock is further than Bound from its own, that is
// when a strict majority of the live members' clocks lie beyond Bound on
// the same side. So with one bad clock among three only that node is
// beyond, two opposite bad clocks do not condemn the good one, and with
// two members neither can tell whose clock is wrong (neither is beyond).
//
// Going beyond needs certainty (each peer's offset less its uncertainty
// beyond Bound), coming back needs certainty within RecoverBound for
// RecoverAfter, judged among at least as many live members as condemned
// it; the first decision, from Unchecked, uses the estimates
// as they are, so it always resolves once enough peers are measured.
// Not safe for concurrent use.
type Judge struct {
	cfg        Config
	state      State
	clearSince time.Time
	// condemned is the most members that saw this node Beyond. It comes
	// back only with as many live members: with fewer (a peer down), the
	// rule cannot condemn anyone (two members can never tell whose clock
	// is wrong), and a node 10 minutes ahead would be cleared just because
	// a good peer died (seen in TestCluster_SkewedNodeNeverLeads).
	condemned int
}

// NewJudge starts Unchecked.
func NewJudge(cfg Config) *Judge {
	if cfg.RecoverBound <= 0 || cfg.RecoverBound > cfg.Bound {
		cfg.RecoverBound = cfg.Bound * 3 / 4
	}
	if cfg.RecoverAfter <= 0 {
		cfg.RecoverAfter = 10 * time.Second
	}
	return &Judge{cfg: cfg}
}

// State is the current state.
func (j *Judge) State() State { return j.state }

// Step judges v at now (local monotonic time).
func (j *Judge) Step(v View, now time.Time) Verdict {
	t := tally{members: 1 + len(v.Peers)}
	offs := []time.Duration{0}
	for _, p := range v.Peers {
		e, ok := v.Estimates[p]
		if !ok {
			t.unknown++
			continue
		}
		t.known = append(t.known, e)
		offs = append(offs, e.Offset)
	}
	prev := j.state
	switch j.state {
	case Unchecked:
		switch {
		case !v.Compared:
		case t.beyond(j.cfg.Bound, pointwise):
			j.state = Beyond
		case t.within(j.cfg.Bound, pointwise):
			j.state = Within
		}
	case Within:
		if t.beyond(j.cfg.Bound, surely) {
			j.state = Beyond
		}
	case Beyond:
		j.condemned = max(j.condemned, t.members)
		switch {
		case t.members < j.condemned || !t.within(j.cfg.RecoverBound, surely):
			j.clearSince = time.Time{}
		case j.clearSince.IsZero():
			j.clearSince = now
		case now.Sub(j.clearSince) >= j.cfg.RecoverAfter:
			j.state = Within
		}
	}
	if j.state == Beyond {
		j.condemned = max(j.condemned, t.members)
	} else {
		j.clearSince, j.condemned = time.Time{}, 0
	}
	return Verdict{
		State: j.state, Changed: j.state != prev, Offset: -medianNearZero(offs),
		Members: t.members, Measured: len(t.known),
	}
}

// medianNearZero is the median of offsets that include our own 0; for an
// even count the middle value nearer 0 (we are not beyond unless both
// middle clocks are).
func medianNearZero(offs []time.Duration) time.Duration {
	slices.Sort(offs)
	lo, hi := offs[(len(offs)-1)/2], offs[len(offs)/2]
	if abs(lo) <= abs(hi) {
		return lo
	}
	return hi
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

type certainty int

const (
	pointwise certainty = iota // estimates taken as exact
	surely                     // every estimate's uncertainty counted against the conclusion
)

type tally struct {
	members, unknown int
	known            []Estimate
}

// majority: more than half of all members.
func (t tally) majority(n int) bool { return 2*n > t.members }

// beyond: a strict majority of the members' clocks is more than bound
// ahead of ours, or more than bound behind (our own clock never is).
func (t tally) beyond(bound time.Duration, c certainty) bool {
	var ahead, behind int
	for _, e := range t.known {
		u := time.Duration(0)
		if c == surely {
			u = e.Uncertainty
		}
		if e.Offset-u > bound {
			ahead++
		}
		if e.Offset+u < -bound {
			behind++
		}
	}
	return t.majority(ahead) || t.majority(behind)
}

// within: no majority of clocks can lie beyond bound on one side, even if
// every unmeasured peer did.
func (t tally) within(bound time.Duration, c certainty) bool {
	ahead, behind := t.unknown, t.unknown
	for _, e := range t.known {
		u := time.Duration(0)
		if c == surely {
			u = e.Uncertainty
		}
		if e.Offset+u > bound {
			ahead++
		}
		if e.Offset-u < -bound {
			behind++
		}
	}
	return !t.majority(ahead) && !t.majority(behind)
}
