package nemesis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Resharder is what the reshard nemesis needs of a backend beyond
// Cluster: the cluster's shard-count growth (Cluster.SetShardCount,
// docs/resharding.md) and the meta leader, which
// runs the slot moves. Both backends have it: it needs no spare nodes.
type Resharder interface {
	// SetShardCount grows the cluster to count data shards, or with 0
	// reports the growth's progress. A refusal any node would give
	// (shrinking, more shards than slots, a node without the call)
	// wraps ErrRefused.
	SetShardCount(ctx context.Context, count uint32) (Growth, error)
	// MetaLeader is the meta leader's slot, or -1.
	MetaLeader(ctx context.Context) int
}

// ErrRefused marks a definite refusal of a shard-count call: asking
// again, or through another node, cannot help.
var ErrRefused = errors.New("refused by the cluster")

// Growth is the shard count and its slot moves as the meta leader
// reports them (client.ShardGrowth).
type Growth struct {
	Count uint32
	// Moves lists the running moves first, then the planned ones; done
	// moves stay listed while their dedup look-ups last.
	Moves []SlotMove
}

// SlotMove is one move of hash slots between shards.
type SlotMove struct {
	ID       uint64 // 0 for a planned move
	From, To uint32
	Slots    int
	Phase    string // PhasePlanned, PhaseSeal, PhaseRoute or PhaseDone
}

// Slot move phases (docs/resharding.md).
const (
	PhasePlanned = "planned"
	PhaseSeal    = "seal"
	PhaseRoute   = "route"
	PhaseDone    = "done"
)

func (m SlotMove) String() string {
	if m.ID == 0 {
		return fmt.Sprintf("planned move of %d slots %d -> %d", m.Slots, m.From, m.To)
	}
	return fmt.Sprintf("move %d of %d slots %d -> %d (%s)", m.ID, m.Slots, m.From, m.To, m.Phase)
}

// running is the first move in seal or route.
func (g Growth) running() (SlotMove, bool) {
	for _, m := range g.Moves {
		if m.Phase == PhaseSeal || m.Phase == PhaseRoute {
			return m, true
		}
	}
	return SlotMove{}, false
}

// done: the count reached target and every move is done.
func (g Growth) done(target uint32) bool {
	return g.Count >= target && !slices.ContainsFunc(g.Moves, func(m SlotMove) bool { return m.Phase != PhaseDone })
}

// unsealed: the count reached target and no move is sealed without its
// route. What is left then (a move in route and the planned ones behind
// it) waits only for consumers: a move stays in route while the old
// shard has live messages of a held FIFO group.
func (g Growth) unsealed(target uint32) bool {
	return g.Count >= target && !slices.ContainsFunc(g.Moves, func(m SlotMove) bool { return m.Phase == PhaseSeal })
}

// routed: the count reached target and every move has its route: none is
// planned or sealed. A move in route waits only for consumers (the old
// shard's live messages of its held FIFO groups), and the moves after it
// run beside it, so a routed growth is as far as a disruption's undo
// waits; the final phase waits for every move to be done
// (AwaitSlotMoves).
func (g Growth) routed(target uint32) bool {
	return g.Count >= target && !slices.ContainsFunc(g.Moves, func(m SlotMove) bool { return m.Phase == PhaseSeal || m.Phase == PhasePlanned })
}

func (g Growth) pending() string {
	var out []string
	for _, m := range g.Moves {
		if m.Phase != PhaseDone {
			out = append(out, m.String())
		}
	}
	return strings.Join(out, ", ")
}

const (
	// MaxReshardGrowth is how many shards a run adds at most beyond the
	// count it starts with.
	MaxReshardGrowth = 3
	// MaxShardsPerMember bounds the shard count by the members: at
	// replication 3 on 3 nodes every node hosts every shard, and the
	// default 4 shards already give each node 4 replicas.
	MaxShardsPerMember = 2
	// ReshardStartShards is the shard count a run with the reshard
	// nemesis starts with unless --shards is given: room to grow by
	// MaxReshardGrowth within MaxShardsPerMember on 3 nodes.
	ReshardStartShards = 2
	// DefaultReshardWait bounds a growth from its grow call to its last
	// slot move done.
	DefaultReshardWait = 90 * time.Second
	// growWait bounds the retries of one grow or progress call (an
	// election, a node down): SetShardCount with the count the cluster
	// already has only reports, so asking again is safe.
	growWait = 20 * time.Second
)

// ReshardCap is the most shards a run that starts with start shards on
// members nodes grows to.
func ReshardCap(start, members int) int {
	return min(start+MaxReshardGrowth, MaxShardsPerMember*members)
}

// reshard grows the shard count by one (up to the cap: MaxShards, and
// ReshardCap's bound on the current members) and, while its slot moves
// run (awaitSlotMove), disrupts them: kill -9 or an isolating partition
// of the meta leader (it drives the moves), the old or the new shard's
// leader of the running move, or any member, held for the drawn hold. The
// undo heals the disruption and waits until every slot move is done
// (ReshardWait). At the cap nothing is grown and nothing disrupted.
func (n *Nemesis) reshard(ctx context.Context, hold *time.Duration, begin func(string)) (string, func(context.Context) error, error) {
	r, ok := n.Cluster.(Resharder)
	if !ok {
		return "", nil, errors.New("this backend cannot grow the shard count")
	}
	c := n.Cluster
	progress := func(ctx context.Context) (Growth, error) { return r.SetShardCount(ctx, 0) }
	g, err := n.growCall(ctx, progress)
	if err != nil {
		begin("reshard")
		return "", nil, fmt.Errorf("shard count: %w", err)
	}
	if n.MaxShards == 0 {
		n.MaxShards = int(g.Count) + MaxReshardGrowth
	}
	limit := uint32(min(n.MaxShards, MaxShardsPerMember*len(c.Members())))
	if g.Count >= limit {
		*hold = 0
		desc := fmt.Sprintf("reshard capped at %d shards (at most %d): nothing grown", g.Count, limit)
		begin(desc)
		return desc, func(context.Context) error { return nil }, nil
	}
	target := g.Count + 1
	desc := fmt.Sprintf("reshard grow %d -> %d shards", g.Count, target)
	begin(desc)
	t0 := time.Now()
	g, err = n.growCall(ctx, func(ctx context.Context) (Growth, error) { return r.SetShardCount(ctx, target) })
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", desc, err)
	}
	if g.Count < target {
		return "", nil, fmt.Errorf("%s: the cluster reports %d shards after the growth", desc, g.Count)
	}
	kill := n.rng.IntN(2) == 0 // else a partition
	g, last := n.awaitSlotMove(ctx, progress, g, n.between(0, n.disruptLag))
	heal := func(context.Context) error { return nil }
	if g.done(target) {
		*hold = 0
		desc += "; slot moves done before the disruption: none"
	} else {
		mv, moving := g.running()
		when := "during " + mv.String()
		if !moving {
			// Moves run one after another: between two, or before the
			// first once the new shard serves.
			when = "between slot moves, after " + last
		}
		v, vwhy := n.reshardVictim(ctx, r, mv, moving)
		if kill {
			off := c.Offset(v)
			if err := c.Kill(ctx, v); err != nil {
				return "", nil, fmt.Errorf("%s: kill -9 %s: %w", desc, c.NodeID(v), err)
			}
			desc += fmt.Sprintf("; kill -9 %s (%s) %s", c.NodeID(v), vwhy, when)
			heal = func(context.Context) error { return c.Start(v, off) }
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
		left, werr := n.awaitReshard(ctx, progress, target)
		if err := errors.Join(herr, werr); err != nil {
			return err
		}
		if left != "" {
			n.Log("nemesis: %s: every slot move routed after %v; waiting for consumers: %s", desc, time.Since(t0).Round(time.Millisecond), left)
			return nil
		}
		n.Log("nemesis: %s: every slot move done after %v", desc, time.Since(t0).Round(time.Millisecond))
		return nil
	}
	return desc, undo, nil
}

// growCall makes a shard-count call, retrying all but a definite
// refusal for at most growWait.
func (n *Nemesis) growCall(ctx context.Context, call func(context.Context) (Growth, error)) (Growth, error) {
	wctx, cancel := context.WithTimeout(ctx, n.growWait)
	defer cancel()
	for {
		g, err := call(wctx)
		if err == nil || errors.Is(err, ErrRefused) {
			return g, err
		}
		if !sleep(wctx, n.drainPoll) {
			return g, fmt.Errorf("no answer within %v: %w", n.growWait, err)
		}
	}
}

// awaitSlotMove polls a growth until a slot move has been running for
// lag (at most a third of disruptLag per move not done, so disruptions
// hit both phases and later moves too) and a move is running then (the
// same or a later one), or every move is done. It waits at most moveWait
// for the first running move, and at most moveWait past the lag for
// one; it returns the last progress seen and the last move seen running.
func (n *Nemesis) awaitSlotMove(ctx context.Context, progress func(context.Context) (Growth, error), g Growth, lag time.Duration) (Growth, string) {
	deadline := time.Now().Add(moveWait)
	var seen time.Time
	last := "no move seen"
	for !g.done(0) {
		if mv, ok := g.running(); ok {
			last = mv.String()
			if seen.IsZero() {
				seen = time.Now()
				left := len(slices.DeleteFunc(slices.Clone(g.Moves), func(m SlotMove) bool { return m.Phase == PhaseDone }))
				lag = min(lag, time.Duration(max(left, 1))*n.disruptLag/3)
				deadline = seen.Add(lag + moveWait)
			}
		}
		_, moving := g.running()
		if moving && time.Since(seen) >= lag || time.Now().After(deadline) || !sleep(ctx, n.drainPoll) {
			break
		}
		if p, err := progress(ctx); err == nil {
			g = p
		}
	}
	return g, last
}

// awaitReshard polls a growth to target until every slot move is done,
// at most ReshardWait; errors on the way (a node down, an election) are
// retried. Once the clients stopped (the run's end) a move in route may
// wait for consumers that are gone: then a growth with no move left in
// seal is enough, and left names what the final drain must let finish
// (AwaitSlotMoves).
func (n *Nemesis) awaitReshard(ctx context.Context, progress func(context.Context) (Growth, error), target uint32) (left string, err error) {
	wctx, cancel := context.WithTimeout(ctx, n.ReshardWait)
	defer cancel()
	var last Growth
	var lastErr error
	for {
		g, err := progress(wctx)
		if err == nil {
			if g.done(target) {
				return "", nil
			}
			if g.routed(target) || (n.clientsStopped() && g.unsealed(target)) {
				return g.pending(), nil
			}
			last = g
		}
		lastErr = err
		if !sleep(wctx, n.drainPoll) {
			return "", fmt.Errorf("slot moves not done within %v: %d shards of %d, moves left: %s (last error: %v)", n.ReshardWait, last.Count, target, last.pending(), lastErr)
		}
	}
}

// clientsStopped: the run's time is up, so the clients no longer consume.
func (n *Nemesis) clientsStopped() bool {
	return !n.end.IsZero() && !time.Now().Before(n.end)
}

// reshardVictim picks the node a disruption hits during a growth: the
// meta leader (it drives the moves), the leader of the running move's old
// shard, that of its new shard, or any member (a shard leader half the
// time), a quarter of the time each. Only running members.
func (n *Nemesis) reshardVictim(ctx context.Context, r Resharder, mv SlotMove, moving bool) (int, string) {
	c := n.Cluster
	up := func(i int) bool { return i >= 0 && slices.Contains(c.Members(), i) && c.Running(i) }
	switch n.rng.IntN(4) {
	case 0:
		if i := r.MetaLeader(ctx); up(i) {
			return i, "meta leader"
		}
	case 1:
		if i, ok := c.Leaders(ctx)[mv.From]; moving && ok && up(i) {
			return i, fmt.Sprintf("leader of shard %d, the old one", mv.From)
		}
	case 2:
		if i, ok := c.Leaders(ctx)[mv.To]; moving && ok && up(i) {
			return i, fmt.Sprintf("leader of shard %d, the new one", mv.To)
		}
	}
	for range 10 {
		if i, why := n.target(ctx); up(i) {
			return i, why
		}
	}
	running := slices.DeleteFunc(c.Members(), func(i int) bool { return !c.Running(i) })
	if len(running) == 0 {
		return c.Members()[0], "node"
	}
	return running[0], "node"
}

// AwaitSlotMoves waits, when the run grows the shard count, until every
// slot move is done (at most ReshardWait), for the final phase: a move
// left in route at the run's end finishes once the final drain consumed
// its held groups on the old shard. waited reports that some move was
// not done at the first look, so the drain must run again for the
// messages the new shard held until then.
func (n *Nemesis) AwaitSlotMoves(ctx context.Context) (waited bool, err error) {
	r, ok := n.Cluster.(Resharder)
	if !ok || !slices.Contains(n.Kinds, "reshard") {
		return false, nil
	}
	progress := func(ctx context.Context) (Growth, error) { return r.SetShardCount(ctx, 0) }
	g, err := n.growCall(ctx, progress)
	if err != nil {
		return false, fmt.Errorf("shard count: %w", err)
	}
	if g.done(0) {
		return false, nil
	}
	wctx, cancel := context.WithTimeout(ctx, n.ReshardWait)
	defer cancel()
	for {
		if !sleep(wctx, n.drainPoll) {
			return true, fmt.Errorf("slot moves not done within %v of the final drain: %s", n.ReshardWait, g.pending())
		}
		if p, err := progress(wctx); err == nil {
			if g = p; g.done(0) {
				return true, nil
			}
		}
	}
}
