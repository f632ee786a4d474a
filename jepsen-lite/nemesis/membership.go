package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Membership is what the membership nemesis needs of a backend beyond
// Cluster: spare node slots, and the cluster's membership commands
// (docs/operations.md, "Replace a dead node", "Removing a node").
// Backends without spare slots (compose) lack it.
type Membership interface {
	// Spares are the slots free for a new node: never started, or their
	// node was retired.
	Spares() []int
	// Join starts a new node, under a fresh id, in spare slot i
	// (--bootstrap-expect 0, --join) and returns its id once it serves
	// and the cluster lists it as an alive meta member. The slot is a
	// member from then on (Cluster.Members).
	Join(ctx context.Context, i int) (string, error)
	// Retire stops the node in slot i, which the cluster retired, and
	// makes the slot a spare again.
	Retire(ctx context.Context, i int) error
	// View is the cluster's membership (Cluster.Nodes) by node id.
	View(ctx context.Context) (map[string]NodeView, error)
	// MetaLeader is the meta leader's slot, or -1.
	MetaLeader(ctx context.Context) int
	// Replace and Remove record a drain (Cluster.ReplaceNode,
	// Cluster.RemoveNode) or, asked again, report its progress.
	Replace(ctx context.Context, old, new string) (Drain, error)
	Remove(ctx context.Context, id string) (Drain, error)
}

// NodeView is one node as Cluster.Nodes lists it.
type NodeView struct {
	Alive bool
	// Meta: "voter", "nonvoter" or "" (not in the meta group).
	Meta              string
	Replicas          int
	Draining, Retired bool
}

// Drain is a drain's progress (Cluster.NodeDrainResponse).
type Drain struct {
	Done bool
	// Moving is the replica move under way ("shard 0: n3 -> n4 (add)").
	Moving string
	// Left is how many replicas the node still holds.
	Left int
}

// Membership operations.
const (
	OpReplace = "replace" // a new node joins and takes every replica of a member, which is retired
	OpRemove  = "remove"  // a member's replicas move to the others and it is retired
	OpAdd     = "add"     // a new node joins (a nonvoter holding nothing until a drain moves replicas to it)
)

const (
	// MinMembers is the fewest members the membership nemesis leaves:
	// with one more down (a kill or a partition during a move, or another
	// fault) a majority of every group is still up.
	MinMembers = 3
	// maxMembers bounds the cluster's growth by adds.
	maxMembers = 5
	// DefaultDrainWait bounds a drain from its start to the old node's
	// retirement (every replica moved, one at a time, then meta).
	DefaultDrainWait = 150 * time.Second
	// moveWait bounds the wait for a drain's first move before the
	// disruption (kill -9 or partition) is applied anyway.
	moveWait = 20 * time.Second
)

// planOp picks the next membership operation for a cluster of members
// members (removable of them may be removed) and spares free slots:
// removal back towards MinMembers two times in three when the cluster is
// larger, otherwise a replacement, or one time in three an addition.
// "" when none is possible (no spare slot and nothing removable).
func planOp(rng *rand.Rand, members, spares int, removable []int) string {
	canRemove := members > MinMembers && len(removable) > 0
	if canRemove && (spares == 0 || rng.IntN(3) < 2) {
		return OpRemove
	}
	switch {
	case spares == 0:
		return ""
	case members < maxMembers && rng.IntN(3) == 0:
		return OpAdd
	default:
		return OpReplace
	}
}

// removable lists the members a remove-node may take: not the node whose
// repair is unfinished, and no meta voter unless the meta group keeps
// MinMembers voters (the cluster refuses otherwise: docs/cluster.md).
func removable(members []int, id func(int) string, view map[string]NodeView, damaged int) []int {
	voters := 0
	for _, i := range members {
		if view[id(i)].Meta == "voter" {
			voters++
		}
	}
	var out []int
	for _, i := range members {
		v, ok := view[id(i)]
		if !ok || i == damaged || v.Retired || v.Draining || v.Meta == "voter" && voters <= MinMembers {
			continue
		}
		out = append(out, i)
	}
	return out
}

// membership runs one membership operation (planOp). A replace or
// remove records the drain and, some seconds into its replica moves
// (awaitMove), disrupts it (kill -9 of the leaving node, the meta leader or any
// member, the new one included; or one of them isolated by a partition),
// held for the drawn hold. The undo heals the disruption
// (a killed node that is not leaving restarts), waits until the drain is
// done (DrainWait) and stops the retired node, whose slot becomes a
// spare. The cluster never has fewer than MinMembers members, and at most
// one of them is down at a time.
func (n *Nemesis) membership(ctx context.Context, hold *time.Duration, begin func(string)) (string, func(context.Context) error, error) {
	m, ok := n.Cluster.(Membership)
	if !ok {
		return "", nil, errors.New("this backend has no spare nodes for membership changes")
	}
	c := n.Cluster
	members, spares := c.Members(), m.Spares()
	view, err := m.View(ctx)
	if err != nil {
		begin("membership")
		return "", nil, fmt.Errorf("cluster membership: %w", err)
	}
	rem := removable(members, c.NodeID, view, n.damaged)
	op := planOp(n.rng, len(members), len(spares), rem)
	switch op {
	case OpAdd:
		*hold = 0
		slot := spares[n.rng.IntN(len(spares))]
		begin(fmt.Sprintf("membership add a new node in slot %d", slot))
		id, err := m.Join(ctx, slot)
		if err != nil {
			return "", nil, fmt.Errorf("join %s: %w", id, err)
		}
		return fmt.Sprintf("membership add %s (%d members)", id, len(c.Members())), func(context.Context) error { return nil }, nil
	case OpReplace, OpRemove:
	default:
		begin("membership")
		return "", nil, fmt.Errorf("no membership change possible: %d members (%d removable), %d spare slots", len(members), len(rem), len(spares))
	}

	var leaving int
	var why, desc string
	var progress func(context.Context) (Drain, error)
	if op == OpRemove {
		leaving, why = rem[n.rng.IntN(len(rem))], "node"
		old := c.NodeID(leaving)
		desc = fmt.Sprintf("membership remove %s (%d members)", old, len(members))
		begin(desc)
		progress = func(ctx context.Context) (Drain, error) { return m.Remove(ctx, old) }
	} else {
		slot := spares[n.rng.IntN(len(spares))]
		leaving, why = n.target(ctx)
		for try := 0; leaving == n.damaged; try++ {
			if try == 20 {
				begin("membership")
				return "", nil, fmt.Errorf("no member to replace but %s, whose repair is unfinished", c.NodeID(n.damaged))
			}
			leaving, why = n.target(ctx)
		}
		old := c.NodeID(leaving)
		begin(fmt.Sprintf("membership replace %s (%s) by a new node in slot %d", old, why, slot))
		id, err := m.Join(ctx, slot)
		if err != nil {
			return "", nil, fmt.Errorf("join %s: %w", id, err)
		}
		desc = fmt.Sprintf("membership replace %s (%s) by %s", old, why, id)
		progress = func(ctx context.Context) (Drain, error) { return m.Replace(ctx, old, id) }
	}
	t0 := time.Now()
	d, err := progress(ctx)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", desc, err)
	}
	kill := n.rng.IntN(2) == 0 // else a partition
	d, last := n.awaitMove(ctx, progress, d, n.between(0, n.disruptLag))
	when := "during " + d.Moving
	if d.Moving == "" {
		// Moves of a drain run one after another, and meta steps
		// follow the last one.
		when = "between moves, after " + last
	}
	heal := func(context.Context) error { return nil }
	switch {
	case d.Done:
		*hold = 0
		desc += "; drain done before the disruption: none"
	default:
		v, vwhy := n.moveVictim(ctx, leaving)
		if kill {
			off := c.Offset(v)
			if err := c.Kill(ctx, v); err != nil {
				return "", nil, fmt.Errorf("%s: kill -9 %s: %w", desc, c.NodeID(v), err)
			}
			desc += fmt.Sprintf("; kill -9 %s (%s) %s", c.NodeID(v), vwhy, when)
			if v != leaving {
				heal = func(context.Context) error { return c.Start(v, off) }
			}
		} else {
			if err := n.isolate(ctx, v); err != nil {
				return "", nil, fmt.Errorf("%s: %w", desc, err)
			}
			desc += fmt.Sprintf("; partition isolate %s (%s) %s", c.NodeID(v), vwhy, when)
			heal = n.Net.Heal
		}
	}
	undo := func(ctx context.Context) error {
		herr := heal(ctx)
		werr := n.awaitDrain(ctx, progress)
		var rerr error
		if werr == nil {
			rerr = m.Retire(ctx, leaving)
		}
		if err := errors.Join(herr, werr, rerr); err != nil {
			return err
		}
		n.Log("nemesis: %s: drained and retired after %v; %d members", desc, time.Since(t0).Round(time.Millisecond), len(c.Members()))
		return nil
	}
	return desc, undo, nil
}

// awaitMove polls a drain until a replica move has been under way for
// lag, at most a third of disruptLag per replica left (so disruptions
// hit every phase of a move, and later shards' moves too), or it is done,
// waiting at most moveWait for the first move; it returns the last
// progress seen and the last move seen.
func (n *Nemesis) awaitMove(ctx context.Context, progress func(context.Context) (Drain, error), d Drain, lag time.Duration) (Drain, string) {
	deadline := time.Now().Add(moveWait)
	var seen time.Time
	last := "no move seen"
	for !d.Done {
		if d.Moving != "" {
			last = d.Moving
			if seen.IsZero() {
				seen = time.Now()
				// A move takes a few seconds: a node with few replicas
				// left would be drained before a longer lag ran out.
				lag = min(lag, time.Duration(max(d.Left, 1))*n.disruptLag/3)
			}
		}
		if !seen.IsZero() && time.Since(seen) >= lag || seen.IsZero() && time.Now().After(deadline) || !sleep(ctx, n.drainPoll) {
			break
		}
		if p, err := progress(ctx); err == nil {
			d = p
		}
	}
	return d, last
}

// awaitDrain polls a drain until it is done, at most DrainWait; errors
// on the way (a node down, an election) are retried.
func (n *Nemesis) awaitDrain(ctx context.Context, progress func(context.Context) (Drain, error)) error {
	wctx, cancel := context.WithTimeout(ctx, n.DrainWait)
	defer cancel()
	var last Drain
	var lastErr error
	for {
		d, err := progress(wctx)
		if err == nil && d.Done {
			return nil
		}
		if err == nil {
			last = d
		}
		lastErr = err
		if !sleep(wctx, n.drainPoll) {
			return fmt.Errorf("drain not done within %v: %d replicas left, moving %q (last error: %v)", n.DrainWait, last.Left, last.Moving, lastErr)
		}
	}
}

// moveVictim picks the node a disruption hits during a move: the leaving
// node, the meta leader (it runs the move executor), or any member
// (a shard leader half the time), each a third of the time. Only running
// nodes: a member down for good would make a kill fail.
func (n *Nemesis) moveVictim(ctx context.Context, leaving int) (int, string) {
	c := n.Cluster
	switch n.rng.IntN(3) {
	case 0:
		if c.Running(leaving) {
			return leaving, "the node leaving"
		}
	case 1:
		if m, ok := c.(Membership); ok {
			if i := m.MetaLeader(ctx); i >= 0 && c.Running(i) {
				return i, "meta leader"
			}
		}
	}
	for range 10 {
		if i, why := n.target(ctx); c.Running(i) {
			return i, why
		}
	}
	running := slices.DeleteFunc(c.Members(), func(i int) bool { return !c.Running(i) })
	if len(running) == 0 {
		return leaving, "the node leaving"
	}
	return running[0], "node"
}

// isolate partitions member v from the other members (Net.Heal undoes
// it); a partition that fails half-way is healed before the error returns.
func (n *Nemesis) isolate(ctx context.Context, v int) error {
	c := n.Cluster
	var rest []int
	for _, j := range c.Members() {
		if j != v {
			rest = append(rest, j)
		}
	}
	if err := n.Net.Partition(ctx, [][]int{{v}, rest}); err != nil {
		return errors.Join(fmt.Errorf("isolate %s: %w", c.NodeID(v), err), n.Net.Heal(context.WithoutCancel(ctx)))
	}
	return nil
}
