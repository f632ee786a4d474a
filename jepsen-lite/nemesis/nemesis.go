// Package nemesis injects faults into a jepsen-lite cluster on a schedule
// drawn from a seed: network partitions of several shapes, kill -9 and
// restart, SIGSTOP pauses longer than the visibility timeout, clock skew
// (restart with --clock-offset), rolling restarts, and damaged files (a
// node's disk lost, its log's tail cut or bytes flipped, then a restart
// with --repair), membership changes (a node replaced, removed or
// added, its replicas moved under a kill -9 or a partition), and shard
// count growth (hash slots moved to a new shard under a kill -9 or a
// partition). One fault is
// active at a time; each is recorded in the history as an invoke when it
// starts and an info when it is undone.
package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/raftq/raftq/jepsen-lite/history"
)

// Kinds lists the fault families a run may enable.
var Kinds = []string{"partition", "kill", "pause", "clock", "restart", "damage", "membership", "reshard"}

// Network is what the nemesis needs of a backend's network: cut the
// cluster into components (nodes by slot) and undo every cut.
type Network interface {
	Partition(ctx context.Context, components [][]int) error
	Heal(ctx context.Context) error
}

// Cluster is what the nemesis needs of a backend's nodes (slots
// 0..Size-1, of which Members hold cluster members; the others are spare
// slots for the membership nemesis). Start with a non-zero offset may
// fail on backends without clock skew.
type Cluster interface {
	Size() int
	Members() []int
	NodeID(i int) string
	Leaders(ctx context.Context) map[uint32]int
	Running(i int) bool
	Offset(i int) time.Duration
	Start(i int, offset time.Duration) error
	Kill(ctx context.Context, i int) error
	Stop(ctx context.Context, i int) error
	Pause(i int) error
	Resume(i int) error
	WaitServing(ctx context.Context, i int) error
}

// Schedule is the nemesis's pace: a fault starts GapMin..GapMax after
// the previous one ended and is held HoldMin..HoldMax; a pause is held at
// least twice the visibility timeout plus up to HoldMin/3.
type Schedule struct {
	GapMin, GapMax, HoldMin, HoldMax time.Duration
}

// DefaultSchedule is the pace of every run: a fault every 2-5 s, held
// 3-8 s.
func DefaultSchedule() Schedule {
	return Schedule{GapMin: 2 * time.Second, GapMax: 5 * time.Second, HoldMin: 3 * time.Second, HoldMax: 8 * time.Second}
}

// Shaper is implemented by networks that cannot make every cut (compose
// can only isolate single nodes): the nemesis draws another shape instead
// of failing.
type Shaper interface {
	CanPartition(components [][]int) error
}

// Nemesis schedules faults.
type Nemesis struct {
	Net     Network
	Cluster Cluster
	Rec     *history.Recorder
	Kinds   []string
	// Visibility is the workload's lease; pauses outlast it.
	Visibility time.Duration
	// Log receives a line per fault.
	Log func(format string, args ...any)
	// Schedule is the pace (DefaultSchedule unless changed before Run).
	Schedule Schedule

	rng    *rand.Rand
	counts map[string]int
	// bag holds the kinds still to draw before it is refilled: every
	// len(Kinds) draws cover every kind.
	bag []string
	// DrainWait bounds a membership change's drain (DefaultDrainWait
	// unless changed before Run).
	DrainWait time.Duration
	// drainPoll is how often a drain's progress is asked for;
	// disruptLag bounds how long after a drain's first move its
	// disruption comes.
	drainPoll, disruptLag time.Duration
	// ReshardWait bounds a growth of the shard count until its last
	// slot move is done (DefaultReshardWait unless changed before Run).
	ReshardWait time.Duration
	// MaxShards is the most shards the reshard nemesis grows the cluster
	// to (ReshardCap; 0: the count its first growth finds plus
	// MaxReshardGrowth).
	MaxShards int
	// growWait bounds a shard-count call's retries.
	growWait time.Duration
	// end is when Run's time is up and the clients stop.
	end time.Time

	// damaged is the node whose damage is not repaired yet, or -1: the
	// damage nemesis never has two nodes damaged at once.
	damaged int
}

// New validates kinds and seeds the schedule.
func New(nw Network, c Cluster, rec *history.Recorder, kinds []string, vis time.Duration, seed uint64) (*Nemesis, error) {
	seen := map[string]bool{}
	for _, k := range kinds {
		if !slices.Contains(Kinds, k) {
			return nil, fmt.Errorf("unknown nemesis %q (known: %s)", k, strings.Join(Kinds, ","))
		}
		if seen[k] {
			return nil, fmt.Errorf("nemesis %q listed twice", k)
		}
		seen[k] = true
	}
	return &Nemesis{Net: nw, Cluster: c, Rec: rec, Kinds: kinds, Visibility: vis, Log: func(string, ...any) {}, Schedule: DefaultSchedule(), DrainWait: DefaultDrainWait, drainPoll: 300 * time.Millisecond, disruptLag: 12 * time.Second,
		ReshardWait: DefaultReshardWait, growWait: growWait,
		rng: rand.New(rand.NewPCG(seed, 0x6e656d65)), counts: map[string]int{}, damaged: -1}, nil
}

// Counts is how many faults of each shape were applied.
func (n *Nemesis) Counts() map[string]int { return n.counts }

// pauseExtra bounds what is drawn on top of a pause's minimum hold.
func (n *Nemesis) pauseExtra() time.Duration { return n.Schedule.HoldMin / 3 }

// maxHold is the longest a fault is held.
func (n *Nemesis) maxHold() time.Duration {
	return max(n.Schedule.HoldMax, 2*n.Visibility+n.pauseExtra())
}

// CoverWithin is the longest the schedule's gaps and holds can delay the
// start of the last kind of the first round: the first len(Kinds) draws
// are each kind once, so it starts after len(Kinds) gaps and the faults
// before it. The time faults take to apply and undo (a rolling restart,
// a repair) comes on top; a run shorter than this may end before every
// kind fired, which makes it INVALID.
func (n *Nemesis) CoverWithin() time.Duration {
	k := time.Duration(len(n.Kinds))
	if k == 0 {
		return 0
	}
	return k*n.Schedule.GapMax + (k-1)*n.maxHold()
}

// next draws the next kind from the bag, refilling it (shuffled) when it
// is empty.
func (n *Nemesis) next() string {
	if len(n.bag) == 0 {
		n.bag = slices.Clone(n.Kinds)
		n.rng.Shuffle(len(n.bag), func(i, j int) { n.bag[i], n.bag[j] = n.bag[j], n.bag[i] })
	}
	k := n.bag[0]
	n.bag = n.bag[1:]
	return k
}

// between draws a duration in [lo, hi) (lo when the range is empty).
func (n *Nemesis) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(n.rng.Int64N(int64(hi-lo)))
}

// Run starts faults for d, one at a time, and returns once the last one is
// undone. A fault that began before d ran out is applied and undone in
// full (its hold is cut at d): faults are applied on ctx, which only an
// interrupt cancels, and undone even then.
func (n *Nemesis) Run(ctx context.Context, d time.Duration) {
	if len(n.Kinds) == 0 {
		return
	}
	end := time.Now().Add(d)
	n.end = end
	for {
		sc := n.Schedule
		if !sleepUntil(ctx, n.between(sc.GapMin, sc.GapMax), end) {
			return
		}
		kind := n.next()
		n.one(ctx, kind, n.between(sc.HoldMin, sc.HoldMax), end)
		if ctx.Err() != nil {
			return
		}
	}
}

// one applies a fault of kind, holds it and undoes it, recording each
// step (history.FNemesis). The invoke is written when the fault starts to
// be applied: a rolling restart's record spans the restart.
func (n *Nemesis) one(ctx context.Context, kind string, hold time.Duration, end time.Time) {
	desc := ""
	begin := func(d string) {
		desc = d
		n.Rec.Add(history.Op{Type: history.Invoke, F: history.FNemesis, Process: history.NemesisProcess, Kind: kind, Fault: d})
	}
	applied, undo, err := n.start(ctx, kind, &hold, begin)
	if err != nil {
		if desc == "" {
			begin(kind)
		}
		n.Log("nemesis %s failed: %v", desc, err)
		n.Rec.Add(history.Op{Type: history.Info, F: history.FNemesis, Process: history.NemesisProcess, Kind: kind, Fault: desc, Error: err.Error()})
		return
	}
	n.counts[shape(applied)]++
	n.Log("nemesis: %s (hold %v)", applied, hold.Round(time.Millisecond))
	n.Rec.Add(history.Op{Type: history.OK, F: history.FNemesis, Process: history.NemesisProcess, Kind: kind, Fault: applied})
	sleepUntil(ctx, hold, end)
	// Undo even when the run is ending or interrupted: the final phase
	// expects a whole cluster (and heals again anyway).
	uerr := undo(context.WithoutCancel(ctx))
	op := history.Op{Type: history.Info, F: history.FNemesis, Process: history.NemesisProcess, Kind: kind, Fault: "end " + applied}
	if uerr != nil {
		op.Error = uerr.Error()
		n.Log("nemesis undo %s: %v", applied, uerr)
	}
	n.Rec.Add(op)
}

// shape names a fault for the counts: "kill", "partition-bridge",
// "damage-flip-bytes", "reshard-grow", ...
func shape(desc string) string {
	f := strings.Fields(desc)
	if (f[0] == "partition" || f[0] == "damage" || f[0] == "membership" || f[0] == "reshard") && len(f) > 1 {
		return f[0] + "-" + f[1]
	}
	return f[0]
}

// sleepUntil sleeps d, cut short at end; false when it was cut short or
// ctx ended.
func sleepUntil(ctx context.Context, d time.Duration, end time.Time) bool {
	if left := time.Until(end); left < d {
		sleep(ctx, max(left, 0))
		return false
	}
	return sleep(ctx, d)
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// target picks a shard leader (half the time) or any member.
func (n *Nemesis) target(ctx context.Context) (int, string) {
	if n.rng.IntN(2) == 0 {
		ls := n.Cluster.Leaders(ctx)
		if len(ls) > 0 {
			shards := make([]uint32, 0, len(ls))
			for s := range ls {
				shards = append(shards, s)
			}
			// Map order is random: sort for a replayable choice.
			slices.Sort(shards)
			s := shards[n.rng.IntN(len(shards))]
			return ls[s], fmt.Sprintf("leader of shard %d", s)
		}
	}
	m := n.Cluster.Members()
	return m[n.rng.IntN(len(m))], "node"
}

func (n *Nemesis) id(i int) string { return n.Cluster.NodeID(i) }

// start applies one fault of kind and returns what it did and its undo.
// It calls begin with a description of the fault right before its first
// action, so the history's invoke marks when the fault started.
func (n *Nemesis) start(ctx context.Context, kind string, hold *time.Duration, begin func(string)) (string, func(context.Context) error, error) {
	c := n.Cluster
	switch kind {
	case "partition":
		return n.partition(ctx, begin)
	case "kill":
		i, why := n.target(ctx)
		desc := fmt.Sprintf("kill -9 %s (%s)", n.id(i), why)
		off := c.Offset(i)
		begin(desc)
		if err := c.Kill(ctx, i); err != nil {
			return "", nil, err
		}
		return desc, func(ctx context.Context) error { return c.Start(i, off) }, nil
	case "pause":
		i, why := n.target(ctx)
		if min := 2 * n.Visibility; *hold < min {
			*hold = min + n.between(0, n.pauseExtra())
		}
		desc := fmt.Sprintf("pause %s (%s)", n.id(i), why)
		begin(desc)
		if err := c.Pause(i); err != nil {
			return "", nil, err
		}
		return desc, func(context.Context) error { return c.Resume(i) }, nil
	case "clock":
		i, why := n.target(ctx)
		ms := 500 + n.rng.IntN(4500)
		if n.rng.IntN(2) == 0 {
			ms = -ms
		}
		off := time.Duration(ms) * time.Millisecond
		desc := fmt.Sprintf("clock %s offset %v (%s)", n.id(i), off, why)
		begin(desc)
		if err := n.restart(ctx, i, off, true); err != nil {
			return "", nil, err
		}
		return desc, func(ctx context.Context) error { return n.restart(ctx, i, 0, true) }, nil
	case "restart":
		*hold = 0
		desc := "restart rolling (SIGTERM each node in turn)"
		begin(desc)
		t0 := time.Now()
		for _, i := range c.Members() {
			if err := n.restart(ctx, i, c.Offset(i), false); err != nil {
				return "", nil, err
			}
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := c.WaitServing(wctx, i)
			cancel()
			if err != nil {
				return "", nil, err
			}
		}
		return fmt.Sprintf("%s: every node serving again after %v", desc, time.Since(t0).Round(time.Millisecond)), func(context.Context) error { return nil }, nil
	case "damage":
		return n.damage(ctx, begin)
	case "membership":
		return n.membership(ctx, hold, begin)
	case "reshard":
		return n.reshard(ctx, hold, begin)
	}
	return "", nil, fmt.Errorf("unknown nemesis %q", kind)
}

// restart stops node i (kill -9 or SIGTERM) and starts it with offset.
func (n *Nemesis) restart(ctx context.Context, i int, off time.Duration, hard bool) error {
	c := n.Cluster
	if c.Running(i) {
		var err error
		if hard {
			err = c.Kill(ctx, i)
		} else {
			err = c.Stop(ctx, i)
		}
		if err != nil {
			return err
		}
	}
	return c.Start(i, off)
}

// partition cuts the network in one of four shapes. A network that cannot
// make a shape (Shaper) has another drawn.
func (n *Nemesis) partition(ctx context.Context, begin func(string)) (string, func(context.Context) error, error) {
	nw := n.Net
	var comps [][]int
	var desc string
	for attempt := 0; ; attempt++ {
		comps, desc = n.drawPartition(ctx)
		sh, ok := nw.(Shaper)
		if !ok {
			break
		}
		err := sh.CanPartition(comps)
		if err == nil {
			break
		}
		if attempt == 20 {
			return "", nil, fmt.Errorf("no partition shape this network can make: %w", err)
		}
	}
	begin(desc)
	if err := nw.Partition(ctx, comps); err != nil {
		return "", nil, errors.Join(err, nw.Heal(context.WithoutCancel(ctx)))
	}
	return desc, nw.Heal, nil
}

func (n *Nemesis) drawPartition(ctx context.Context) ([][]int, string) {
	// Spare slots sit in no component: they keep every link.
	members := n.Cluster.Members()
	nn := len(members)
	perm := n.rng.Perm(nn)
	for k, p := range perm {
		perm[k] = members[p]
	}
	switch shape := n.rng.IntN(4); shape {
	case 0:
		i, why := n.target(ctx)
		var rest []int
		for _, j := range members {
			if j != i {
				rest = append(rest, j)
			}
		}
		return [][]int{{i}, rest}, fmt.Sprintf("partition isolate %s (%s)", n.id(i), why)
	case 1:
		k := (nn - 1) / 2
		return [][]int{perm[:k], perm[k:]}, fmt.Sprintf("partition halves minority %s majority %s", n.ids(perm[:k]), n.ids(perm[k:]))
	case 2:
		// perm[0] sees both sides; the sides cannot see each other.
		rest := perm[1:]
		k := len(rest) / 2
		return [][]int{rest[:k], rest[k:]}, fmt.Sprintf("partition bridge %s between %s and %s", n.id(perm[0]), n.ids(rest[:k]), n.ids(rest[k:]))
	default:
		a, b := []int{}, []int{}
		for _, i := range perm {
			if n.rng.IntN(2) == 0 {
				a = append(a, i)
			} else {
				b = append(b, i)
			}
		}
		// Both sides non-empty, or it is no partition at all.
		if len(a) == 0 {
			a, b = b[:1], b[1:]
		} else if len(b) == 0 {
			a, b = a[1:], a[:1]
		}
		return [][]int{a, b}, fmt.Sprintf("partition random %s | %s", n.ids(a), n.ids(b))
	}
}

func (n *Nemesis) ids(is []int) string {
	var out []string
	for _, i := range is {
		out = append(out, n.id(i))
	}
	return "[" + strings.Join(out, " ") + "]"
}

// HealAll undoes everything: network rules, pauses, dead nodes and clock
// offsets.
func (n *Nemesis) HealAll(ctx context.Context) error {
	if err := n.Net.Heal(ctx); err != nil {
		return err
	}
	c := n.Cluster
	for _, i := range c.Members() {
		switch {
		case !c.Running(i):
			if err := c.Start(i, 0); err != nil {
				return err
			}
		case c.Offset(i) != 0:
			if err := n.restart(ctx, i, 0, true); err != nil {
				return err
			}
		default:
			_ = c.Resume(i)
		}
	}
	return nil
}
