// Package nemesis injects faults into a jepsen-lite cluster on a schedule
// drawn from a seed: network partitions of several shapes, kill -9 and
// restart, SIGSTOP pauses longer than the visibility timeout, clock skew
// (restart with --clock-offset), rolling restarts, and damaged files (a
// node's disk lost, its log's tail cut or bytes flipped, then a restart
// with --repair). One fault is active at a time; each is recorded in the
// history as an invoke when it starts and an info when it is undone.
package nemesis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/raftq/raftq/jepsen-lite/history"
)

// Kinds lists the fault families a run may enable.
var Kinds = []string{"partition", "kill", "pause", "clock", "restart", "damage"}

// Network is what the nemesis needs of a backend's network: cut the
// cluster into components (nodes by slot) and undo every cut.
type Network interface {
	Partition(ctx context.Context, components [][]int) error
	Heal(ctx context.Context) error
}

// Cluster is what the nemesis needs of a backend's nodes (slots 0..Size-1).
// Start with a non-zero offset may fail on backends without clock skew.
type Cluster interface {
	Size() int
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
	// Ensure lists kinds that must run at least once: the first draw
	// after half the run (by ctx's deadline) is one that has not run yet.
	Ensure []string

	rng    *rand.Rand
	counts map[string]int
	ran    map[string]int // by kind
	// damaged is the node whose damage is not repaired yet, or -1: the
	// damage nemesis never has two nodes damaged at once.
	damaged int
}

// New validates kinds and seeds the schedule.
func New(nw Network, c Cluster, rec *history.Recorder, kinds []string, vis time.Duration, seed uint64) (*Nemesis, error) {
	for _, k := range kinds {
		ok := false
		for _, known := range Kinds {
			ok = ok || k == known
		}
		if !ok {
			return nil, fmt.Errorf("unknown nemesis %q (known: %s)", k, strings.Join(Kinds, ","))
		}
	}
	return &Nemesis{Net: nw, Cluster: c, Rec: rec, Kinds: kinds, Visibility: vis, Log: func(string, ...any) {},
		rng: rand.New(rand.NewPCG(seed, 0x6e656d65)), counts: map[string]int{}, ran: map[string]int{}, damaged: -1}, nil
}

// Counts is how many faults of each shape ran.
func (n *Nemesis) Counts() map[string]int { return n.counts }

// Run injects faults until ctx ends, then undoes the active one.
func (n *Nemesis) Run(ctx context.Context) {
	if len(n.Kinds) == 0 {
		return
	}
	start := time.Now()
	for {
		if !sleep(ctx, time.Duration(2000+n.rng.IntN(3000))*time.Millisecond) {
			return
		}
		kind := n.Kinds[n.rng.IntN(len(n.Kinds))]
		if k := n.overdue(ctx, start); k != "" {
			kind = k
		}
		n.ran[kind]++
		hold := time.Duration(3000+n.rng.IntN(5000)) * time.Millisecond
		desc, undo, err := n.start(ctx, kind, &hold)
		if err != nil {
			n.Log("nemesis %s: %v", kind, err)
			n.Rec.Add(history.Op{Type: history.Fail, F: history.FNemesis, Process: history.NemesisProcess, Fault: kind, Error: err.Error()})
			continue
		}
		n.counts[shape(desc)]++
		n.Log("nemesis: %s (hold %v)", desc, hold)
		n.Rec.Add(history.Op{Type: history.Invoke, F: history.FNemesis, Process: history.NemesisProcess, Fault: desc})
		sleep(ctx, hold)
		// Undo even when the run is ending: the final phase expects a
		// whole cluster, and it heals again anyway.
		uerr := undo(context.WithoutCancel(ctx))
		op := history.Op{Type: history.Info, F: history.FNemesis, Process: history.NemesisProcess, Fault: "end " + desc}
		if uerr != nil {
			op.Error = uerr.Error()
			n.Log("nemesis undo %s: %v", desc, uerr)
		}
		n.Rec.Add(op)
		if ctx.Err() != nil {
			return
		}
	}
}

// overdue is an Ensure kind that has not run although half the run has
// passed, or "". The kind is drawn as usual first, so the schedule up to
// then is the one the seed gave before Ensure existed.
func (n *Nemesis) overdue(ctx context.Context, start time.Time) string {
	end, ok := ctx.Deadline()
	if !ok || time.Since(start) < end.Sub(start)/2 {
		return ""
	}
	for _, k := range n.Ensure {
		if n.ran[k] == 0 && slices.Contains(n.Kinds, k) {
			return k
		}
	}
	return ""
}

// shape names a fault for the counts: "kill", "partition-bridge",
// "damage-flip-bytes", ...
func shape(desc string) string {
	f := strings.Fields(desc)
	if (f[0] == "partition" || f[0] == "damage") && len(f) > 1 {
		return f[0] + "-" + f[1]
	}
	return f[0]
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

// target picks a shard leader (half the time) or any running node.
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
	return n.rng.IntN(n.Cluster.Size()), "node"
}

func (n *Nemesis) id(i int) string { return n.Cluster.NodeID(i) }

// start begins one fault and returns its description and its undo.
func (n *Nemesis) start(ctx context.Context, kind string, hold *time.Duration) (string, func(context.Context) error, error) {
	c := n.Cluster
	switch kind {
	case "partition":
		return n.partition(ctx)
	case "kill":
		i, why := n.target(ctx)
		if err := c.Kill(ctx, i); err != nil {
			return "", nil, err
		}
		off := c.Offset(i)
		return fmt.Sprintf("kill -9 %s (%s)", n.id(i), why), func(ctx context.Context) error { return c.Start(i, off) }, nil
	case "pause":
		i, why := n.target(ctx)
		if min := 2 * n.Visibility; *hold < min {
			*hold = min + time.Duration(n.rng.IntN(1000))*time.Millisecond
		}
		if err := c.Pause(i); err != nil {
			return "", nil, err
		}
		return fmt.Sprintf("pause %s (%s)", n.id(i), why), func(context.Context) error { return c.Resume(i) }, nil
	case "clock":
		i, why := n.target(ctx)
		ms := 500 + n.rng.IntN(4500)
		if n.rng.IntN(2) == 0 {
			ms = -ms
		}
		off := time.Duration(ms) * time.Millisecond
		if err := n.restart(ctx, i, off, true); err != nil {
			return "", nil, err
		}
		return fmt.Sprintf("clock %s offset %v (%s)", n.id(i), off, why), func(ctx context.Context) error { return n.restart(ctx, i, 0, true) }, nil
	case "restart":
		*hold = 0
		for i := range c.Size() {
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
		return "restart rolling (SIGTERM each node in turn)", func(context.Context) error { return nil }, nil
	case "damage":
		return n.damage(ctx)
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

func (n *Nemesis) partition(ctx context.Context) (string, func(context.Context) error, error) {
	nw, nn := n.Net, n.Cluster.Size()
	perm := n.rng.Perm(nn)
	var comps [][]int
	var desc string
	switch shape := n.rng.IntN(4); shape {
	case 0:
		i, why := n.target(ctx)
		var rest []int
		for j := range nn {
			if j != i {
				rest = append(rest, j)
			}
		}
		comps = [][]int{{i}, rest}
		desc = fmt.Sprintf("partition isolate %s (%s)", n.id(i), why)
	case 1:
		k := (nn - 1) / 2
		comps = [][]int{perm[:k], perm[k:]}
		desc = fmt.Sprintf("partition halves minority %s majority %s", n.ids(perm[:k]), n.ids(perm[k:]))
	case 2:
		// perm[0] sees both sides; the sides cannot see each other.
		rest := perm[1:]
		k := len(rest) / 2
		comps = [][]int{rest[:k], rest[k:]}
		desc = fmt.Sprintf("partition bridge %s between %s and %s", n.id(perm[0]), n.ids(rest[:k]), n.ids(rest[k:]))
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
		comps = [][]int{a, b}
		desc = fmt.Sprintf("partition random %s | %s", n.ids(a), n.ids(b))
	}
	if err := nw.Partition(ctx, comps); err != nil {
		_ = nw.Heal(context.WithoutCancel(ctx))
		return "", nil, err
	}
	return desc, nw.Heal, nil
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
	for i := range c.Size() {
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
