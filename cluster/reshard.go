package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/meta/metapb"
	"github.com/raftq/raftq/peer/peerpb"
)

// Growing the shard count is a duty of the meta leader. GrowShards (the
// operator's request) records the new shards in the map; this duty then
// carries out the slot moves meta.PlanSlotMoves asks for, one at a time,
// each through its phases (docs/resharding.md):
//
//	SEAL   the old shard seals the slots (it refuses new keyed sends for
//	       them) and names the FIFO groups it still holds messages of; the
//	       new shard holds those groups (it takes their new messages but
//	       leases none of them)
//	ROUTE  the slot table names the new shard; each held group is released
//	       on the new shard once the old one has no live message of it
//	DONE   every group released; the record stays until its dedup
//	       look-ups end (dedup_until), then is forgotten
//
// Every step is recorded in meta before it is acted on, and every shard
// command is idempotent by move id, so a new meta leader re-runs the
// phase the record is in.

// slotMoveEvery spaces the driver's passes over a running move: each pass
// of the ROUTE phase proposes one seal on the old shard to learn which
// groups it still holds.
const slotMoveEvery = 500 * time.Millisecond

// maxGroupsPerCommand bounds the groups one HoldGroups or ReleaseGroups
// entry carries, so a slot with very many FIFO groups never makes one
// oversized raft entry.
const maxGroupsPerCommand = 1000

// resharder is the meta leader's view of the running slot moves; none of
// it is replicated.
type resharder struct {
	mu   sync.Mutex
	term uint64
	next time.Time
	// live is, by move id, the last set of held groups the old shard
	// still had live: a group that drops out of it is released on the new
	// shard. A new meta leader starts with none, and releases a group only
	// once it has seen it live and then gone, or when none is left.
	live map[uint64]map[groupKey]bool
	// waiting is why the last pass could not go on, logged once per reason.
	waiting oncePerReason
}

type groupKey struct{ queue, group string }

// reshardDuty is called on every pass of the meta duties loop.
func (n *Node) reshardDuty(ctx context.Context) {
	m := n.meta.ShardMap()
	if !m.Placed() {
		return
	}
	r := &n.reshard
	r.mu.Lock()
	now := time.Now()
	if term := n.meta.Raft().CurrentTerm(); term != r.term {
		r.term, r.next, r.live = term, time.Time{}, map[uint64]map[groupKey]bool{}
		r.waiting.reset()
	}
	due := now.After(r.next)
	if due {
		r.next = now.Add(slotMoveEvery)
	}
	r.mu.Unlock()
	if !due {
		return
	}
	if err := n.reshardStep(ctx, m); r.waiting.changed(err) && ctx.Err() == nil {
		n.logger.Info("resharding: not yet", "err", err)
	}
}

// reshardStep seals the move recorded in SEAL, if any, or else starts
// the next move the plan asks for; then it releases what it can of every
// move in ROUTE, and forgets finished moves whose dedup look-ups have
// ended. Moves in ROUTE run beside each other and beside the next one:
// one waits for consumers of its held groups on the old shard, which need
// not hold the others up, and the planner never picks a slot of a running
// move.
func (n *Node) reshardStep(ctx context.Context, m meta.ShardMap) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	nowMs := time.Now().UnixMilli()
	var errs []error
	sealing := false
	for _, mv := range m.SlotMoves {
		switch {
		case mv.Phase == metapb.SlotMovePhase_SLOT_MOVE_PHASE_SEAL:
			sealing = true
			errs = append(errs, n.sealSlots(ctx, m, mv))
		case mv.Phase == metapb.SlotMovePhase_SLOT_MOVE_PHASE_ROUTE:
			errs = append(errs, n.releaseGroups(ctx, mv))
		case mv.Forgettable(nowMs):
			errs = append(errs, n.meta.ForgetSlotMove(ctx, mv.ID))
		}
	}
	if !sealing {
		errs = append(errs, n.startSlotMove(ctx, m))
	}
	return errors.Join(errs...)
}

// startSlotMove records the SEAL of the plan's next move, once its new
// shard serves: sends for the move's slots wait from the seal until the
// new shard holds its groups.
func (n *Node) startSlotMove(ctx context.Context, m meta.ShardMap) error {
	plan := meta.PlanSlotMoves(m)
	if len(plan) == 0 {
		return nil
	}
	mv := plan[0]
	if err := n.shardServes(ctx, mv.To); err != nil {
		return fmt.Errorf("shard %d is not serving yet: %w", mv.To, err)
	}
	if err := n.meta.SlotMoveStep(ctx, mv, metapb.SlotMovePhase_SLOT_MOVE_PHASE_SEAL); err != nil {
		return err
	}
	n.logger.Info("resharding: slot move started", "move", mv.ID, "slots", len(mv.Slots), "from", mv.From, "to", mv.To, "moves_left", len(plan)-1)
	return nil
}

// shardServes checks that a shard has a leader that answers a read.
func (n *Node) shardServes(ctx context.Context, id uint32) error {
	c, err := n.shardCaller()
	if err != nil {
		return err
	}
	_, err = c.Read(ctx, &peerpb.ShardReadRequest{ShardId: id, Query: &peerpb.ShardReadRequest_StatsQueue{StatsQueue: ""}})
	return err
}

// sealSlots runs the SEAL phase: seal on the old shard, hold on the new
// one, then record ROUTE with the end of the dedup look-ups.
func (n *Node) sealSlots(ctx context.Context, m meta.ShardMap, mv meta.SlotMove) error {
	live, err := n.sealOn(ctx, m, mv)
	if err != nil {
		return err
	}
	for part := range slices.Chunk(live, maxGroupsPerCommand) {
		cmd := &fsmpb.Command{Cmd: &fsmpb.Command_HoldGroups{HoldGroups: &fsmpb.HoldGroups{
			MoveId: mv.ID, FromShard: mv.From, Items: part}}}
		if err := n.applyOK(ctx, mv.To, cmd); err != nil {
			return fmt.Errorf("hold %d groups on shard %d: %w", len(part), mv.To, err)
		}
	}
	// Keys the old shard took before the seal dedup sends for as long as
	// the longest window of any queue; the window starts at the seal, so
	// counting from now (after it) is on the safe side.
	mv.DedupUntilMs = time.Now().Add(n.maxDedupWindow()).UnixMilli()
	if err := n.meta.SlotMoveStep(ctx, mv, metapb.SlotMovePhase_SLOT_MOVE_PHASE_ROUTE); err != nil {
		return err
	}
	n.logger.Info("resharding: slots routed to their new shard", "move", mv.ID, "slots", len(mv.Slots), "from", mv.From, "to", mv.To, "held_groups", len(live))
	return nil
}

// sealOn proposes the move's seal on the old shard (idempotent) and
// returns the FIFO groups of the sealed slots that still have live
// messages there.
func (n *Node) sealOn(ctx context.Context, m meta.ShardMap, mv meta.SlotMove) ([]*fsmpb.QueueGroup, error) {
	cmd := &fsmpb.Command{Cmd: &fsmpb.Command_SealSlots{SealSlots: &fsmpb.SealSlots{
		MoveId: mv.ID, Slots: mv.Slots, SlotCount: m.Table().Slots, ToShard: mv.To}}}
	c, err := n.shardCaller()
	if err != nil {
		return nil, err
	}
	res, err := c.Apply(ctx, mv.From, cmd)
	if err != nil {
		return nil, fmt.Errorf("seal %d slots on shard %d: %w", len(mv.Slots), mv.From, err)
	}
	if c := res.GetStatus().GetCode(); c != fsmpb.Code_CODE_OK {
		return nil, fmt.Errorf("seal %d slots on shard %d: %s: %s", len(mv.Slots), mv.From, c, res.GetStatus().GetMessage())
	}
	return res.GetSeal().GetLiveGroups(), nil
}

// releaseGroups runs the ROUTE phase: it releases on the new shard the
// held groups the old shard no longer has live messages of, and records
// DONE when none is left.
func (n *Node) releaseGroups(ctx context.Context, mv meta.SlotMove) error {
	m := n.meta.ShardMap()
	live, err := n.sealOn(ctx, m, mv)
	if err != nil {
		return err
	}
	if len(live) == 0 {
		cmd := &fsmpb.Command{Cmd: &fsmpb.Command_ReleaseGroups{ReleaseGroups: &fsmpb.ReleaseGroups{MoveId: mv.ID, All: true}}}
		if err := n.applyOK(ctx, mv.To, cmd); err != nil {
			return fmt.Errorf("release the groups of move %d on shard %d: %w", mv.ID, mv.To, err)
		}
		if err := n.meta.SlotMoveStep(ctx, mv, metapb.SlotMovePhase_SLOT_MOVE_PHASE_DONE); err != nil {
			return err
		}
		n.reshard.mu.Lock()
		delete(n.reshard.live, mv.ID)
		n.reshard.mu.Unlock()
		n.logger.Info("resharding: slot move done", "move", mv.ID, "slots", len(mv.Slots), "from", mv.From, "to", mv.To)
		return nil
	}
	now := make(map[groupKey]bool, len(live))
	for _, g := range live {
		now[groupKey{g.GetQueue(), g.GetGroup()}] = true
	}
	r := &n.reshard
	r.mu.Lock()
	var gone []*fsmpb.QueueGroup
	for k := range r.live[mv.ID] {
		if !now[k] {
			gone = append(gone, &fsmpb.QueueGroup{Queue: k.queue, Group: k.group})
		}
	}
	r.mu.Unlock()
	slices.SortFunc(gone, func(a, b *fsmpb.QueueGroup) int {
		if a.GetQueue() != b.GetQueue() {
			return strings.Compare(a.GetQueue(), b.GetQueue())
		}
		return strings.Compare(a.GetGroup(), b.GetGroup())
	})
	for part := range slices.Chunk(gone, maxGroupsPerCommand) {
		cmd := &fsmpb.Command{Cmd: &fsmpb.Command_ReleaseGroups{ReleaseGroups: &fsmpb.ReleaseGroups{MoveId: mv.ID, Items: part}}}
		if err := n.applyOK(ctx, mv.To, cmd); err != nil {
			return fmt.Errorf("release %d groups on shard %d: %w", len(part), mv.To, err)
		}
	}
	r.mu.Lock()
	r.live[mv.ID] = now
	r.mu.Unlock()
	return nil
}

// applyOK proposes cmd on a shard and turns an FSM refusal into an error.
func (n *Node) applyOK(ctx context.Context, id uint32, cmd *fsmpb.Command) error {
	c, err := n.shardCaller()
	if err != nil {
		return err
	}
	res, err := c.Apply(ctx, id, cmd)
	if err != nil {
		return err
	}
	if c := res.GetStatus().GetCode(); c != fsmpb.Code_CODE_OK {
		return fmt.Errorf("%s: %s", c, res.GetStatus().GetMessage())
	}
	return nil
}

// maxDedupWindow is the longest dedup window of any queue: how long a key
// the old shard took before a seal can still turn a send into a
// duplicate. A queue created later has no key there, and a window raised
// later does not lengthen the keys already taken (each expires as its
// window was when it was taken).
func (n *Node) maxDedupWindow() time.Duration {
	var w int64
	for _, p := range n.meta.QueuePolicies() {
		w = max(w, fsm.NormalizePolicy(p).GetDedupWindowMs())
	}
	return time.Duration(w) * time.Millisecond
}
