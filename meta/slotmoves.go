package meta

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/raftq/raftq/meta/metapb"
	"github.com/raftq/raftq/wire"
)

// Slot moves hand a set of hash slots from one shard to another, one
// recorded phase at a time (the design: messages never move; the old shard
// refuses new keyed sends of the slots, the new one holds their FIFO
// groups until the old one has none live). Each step is a meta command the
// FSM checks against the record it keeps, so the driver on the meta leader
// acts on a phase only once it is committed, and a new leader resumes from
// the record:
//
//	SEAL   recorded; the slot owners still say from
//	ROUTE  the slot owners say to; dedup_until_ms is recorded
//	DONE   every held group released; kept for dedup look-ups
//
// A DONE record is dropped by ForgetSlotMove once its dedup_until_ms has
// passed; a SEAL record by AbortSlotMove. A slot is in at most one running
// (not DONE) move. A DONE record does not stop a new move of its slots
// (a fresh shard's slots all came by one move, and it may have to give
// some on the next growth); DedupPeers then follows both moves, and the
// planner gives away other slots first (PlanSlotMoves).

// SlotMove is a slot move as the map records it; a planned move
// (PlanSlotMoves) has Phase UNSPECIFIED.
type SlotMove struct {
	ID           uint64
	Slots        []uint32 // ascending
	From, To     uint32
	Phase        metapb.SlotMovePhase
	DedupUntilMs int64
	// RoutedMs is the ROUTE entry's time (metapb.SlotMove.routed_ms).
	RoutedMs int64
}

// Running reports whether the move is recorded and not yet DONE.
func (mv SlotMove) Running() bool {
	return mv.Phase == metapb.SlotMovePhase_SLOT_MOVE_PHASE_SEAL || mv.Phase == metapb.SlotMovePhase_SLOT_MOVE_PHASE_ROUTE
}

// SlotMoveOf returns the recorded slot move id, if any.
func (m ShardMap) SlotMoveOf(id uint64) (SlotMove, bool) {
	for _, mv := range m.SlotMoves {
		if mv.ID == id {
			return mv, true
		}
	}
	return SlotMove{}, false
}

// RunningSlotMoves returns the recorded moves not yet DONE, by id.
func (m ShardMap) RunningSlotMoves() []SlotMove {
	var out []SlotMove
	for _, mv := range m.SlotMoves {
		if mv.Running() {
			out = append(out, mv)
		}
	}
	return out
}

// DedupPeers is the shards a keyed send of slot, routed to the slot's
// owner, first asks whether its dedup key is live there (the design's
// dedup window), latest first: the From of every move of the slot that is
// at ROUTE or DONE and whose window is still open at nowMs, from the
// latest move, whose To owns the slot, back along the chain of moves that
// brought it there (a slot moved twice within a window has two). Empty
// when no window is open: the owner's own dedup decides.
func (m ShardMap) DedupPeers(slot uint32, nowMs int64) []PriorOwner {
	t := m.Table()
	if slot >= t.Slots || !t.Valid() {
		return nil
	}
	var out []PriorOwner
	at := t.Owner(slot) // the chain's current end
	for i := len(m.SlotMoves) - 1; i >= 0; i-- {
		mv := m.SlotMoves[i] // by id, so newest first
		if mv.Phase < metapb.SlotMovePhase_SLOT_MOVE_PHASE_ROUTE || mv.To != at || nowMs >= mv.DedupUntilMs {
			continue
		}
		if _, in := slices.BinarySearch(mv.Slots, slot); !in {
			continue
		}
		if !slices.ContainsFunc(out, func(p PriorOwner) bool { return p.Shard == mv.From }) && mv.From != t.Owner(slot) {
			out = append(out, PriorOwner{Shard: mv.From, Move: mv.ID, RoutedMs: mv.RoutedMs})
		}
		at = mv.From
	}
	return out
}

func slotMoveFromProto(p *metapb.SlotMove) SlotMove {
	return SlotMove{ID: p.GetId(), Slots: slices.Clone(p.GetSlots()), From: p.GetFrom(), To: p.GetTo(),
		Phase: p.GetPhase(), DedupUntilMs: p.GetDedupUntilMs(), RoutedMs: p.GetRoutedMs()}
}

// SlotPhaseName is a slot move phase as people read it: "seal", "route".
func SlotPhaseName(p metapb.SlotMovePhase) string {
	return strings.ToLower(strings.TrimPrefix(p.String(), "SLOT_MOVE_PHASE_"))
}

// SlotMoveStep records phase of slot move mv (its ID, Slots, From and To;
// DedupUntilMs with ROUTE). A step the record is at or past changes
// nothing and succeeds; steps the record does not allow are refused with
// ErrRefused.
func (s *Store) SlotMoveStep(ctx context.Context, mv SlotMove, phase metapb.SlotMovePhase) error {
	cmd := &metapb.Command{Cmd: &metapb.Command_SlotMoveStep{SlotMoveStep: &metapb.SlotMoveStep{
		Id: mv.ID, Slots: slices.Clone(mv.Slots), From: mv.From, To: mv.To, Phase: phase, DedupUntilMs: mv.DedupUntilMs}}}
	if _, err := s.apply(ctx, cmd); err != nil {
		return fmt.Errorf("slot move %d (%d slots, shard %d to %d), %s: %w", mv.ID, len(mv.Slots), mv.From, mv.To, SlotPhaseName(phase), err)
	}
	return nil
}

// AbortSlotMove drops slot move id while it is at SEAL; ErrRefused once it
// is at ROUTE or later. Aborting a move no longer recorded succeeds (a
// retried abort).
func (s *Store) AbortSlotMove(ctx context.Context, id uint64) error {
	cmd := &metapb.Command{Cmd: &metapb.Command_AbortSlotMove{AbortSlotMove: &metapb.AbortSlotMove{Id: id}}}
	if _, err := s.apply(ctx, cmd); err != nil {
		return fmt.Errorf("abort slot move %d: %w", id, err)
	}
	return nil
}

// ForgetSlotMove drops the record of slot move id once it is DONE and its
// dedup window has passed by the leader's clock; ErrRefused before.
// Forgetting a move no longer recorded succeeds.
func (s *Store) ForgetSlotMove(ctx context.Context, id uint64) error {
	cmd := &metapb.Command{Cmd: &metapb.Command_ForgetSlotMove{ForgetSlotMove: &metapb.ForgetSlotMove{Id: id}}}
	if _, err := s.apply(ctx, cmd); err != nil {
		return fmt.Errorf("forget slot move %d: %w", id, err)
	}
	return nil
}

func invalid(format string, args ...any) *metapb.Result {
	return &metapb.Result{Code: metapb.Code_CODE_INVALID, Message: fmt.Sprintf(format, args...)}
}

func (f *FSM) slotMoveStep(c *metapb.SlotMoveStep, nowMs int64) *metapb.Result {
	if f.shardMap == nil {
		return refusal("no shard map is placed")
	}
	id, from, to := c.GetId(), c.GetFrom(), c.GetTo()
	count, slots := f.shardMap.GetCount(), f.slotCount()
	switch {
	case id == 0:
		return invalid("a slot move needs an id")
	case from >= count || to >= count || from == to:
		return invalid("slot move %d: shards %d and %d must be two different shards of %d", id, from, to, count)
	case len(c.GetSlots()) == 0:
		return invalid("slot move %d moves no slots", id)
	case c.GetPhase() < metapb.SlotMovePhase_SLOT_MOVE_PHASE_SEAL || c.GetPhase() > metapb.SlotMovePhase_SLOT_MOVE_PHASE_DONE:
		return invalid("unknown slot move phase %v", c.GetPhase())
	}
	for i, s := range c.GetSlots() {
		if s >= slots || (i > 0 && s <= c.GetSlots()[i-1]) {
			return invalid("slot move %d: slots must be ascending, distinct and below %d", id, slots)
		}
	}
	i := slices.IndexFunc(f.shardMap.GetSlotMoves(), func(m *metapb.SlotMove) bool { return m.GetId() == id })
	if i < 0 {
		return f.startSlotMove(c)
	}
	mv := f.shardMap.GetSlotMoves()[i]
	switch {
	case mv.GetFrom() != from || mv.GetTo() != to || !slices.Equal(mv.GetSlots(), c.GetSlots()):
		return refusal("slot move %d is another move: %d slots from shard %d to %d", id, len(mv.GetSlots()), mv.GetFrom(), mv.GetTo())
	case c.GetPhase() <= mv.GetPhase():
		return &metapb.Result{} // recorded already: a retried step
	case c.GetPhase() != mv.GetPhase()+1:
		return refusal("slot move %d is at %s; it cannot skip to %s", id, SlotPhaseName(mv.GetPhase()), SlotPhaseName(c.GetPhase()))
	}
	if c.GetPhase() == metapb.SlotMovePhase_SLOT_MOVE_PHASE_ROUTE {
		f.materializeSlots()
		for _, s := range mv.GetSlots() {
			f.shardMap.SlotOwners[s] = to
		}
		mv.DedupUntilMs = c.GetDedupUntilMs()
		mv.RoutedMs = nowMs
	}
	mv.Phase = c.GetPhase()
	f.shardMap.Version++
	return &metapb.Result{}
}

// startSlotMove records a new slot move at SEAL; c is validated and no
// move c.id is recorded.
func (f *FSM) startSlotMove(c *metapb.SlotMoveStep) *metapb.Result {
	id, from, to := c.GetId(), c.GetFrom(), c.GetTo()
	if id < f.nextSlotMoveID() {
		// The id was used by a move that was aborted or forgotten since.
		if c.GetPhase() != metapb.SlotMovePhase_SLOT_MOVE_PHASE_SEAL && f.slotsOwnedBy(c.GetSlots(), to) {
			return &metapb.Result{} // finished and forgotten already: a retried step
		}
		return refusal("slot move %d is no longer recorded (aborted or finished); a new move takes id %d or above", id, f.nextSlotMoveID())
	}
	if c.GetPhase() != metapb.SlotMovePhase_SLOT_MOVE_PHASE_SEAL {
		return refusal("slot move %d is not recorded; it starts at seal", id)
	}
	if !f.slotsOwnedBy(c.GetSlots(), from) {
		return refusal("slot move %d: shard %d does not own every slot it would move", id, from)
	}
	for _, other := range f.shardMap.GetSlotMoves() {
		if other.GetPhase() == metapb.SlotMovePhase_SLOT_MOVE_PHASE_DONE {
			continue
		}
		for _, s := range c.GetSlots() {
			if _, found := slices.BinarySearch(other.GetSlots(), s); found {
				return refusal("slot move %d: slot %d is in running slot move %d; one move per slot at a time", id, s, other.GetId())
			}
		}
	}
	// The owners are explicit from the first move on, so that ROUTE only
	// ever edits them.
	f.materializeSlots()
	f.shardMap.SlotMoves = append(f.shardMap.SlotMoves, &metapb.SlotMove{Id: id, Slots: slices.Clone(c.GetSlots()), From: from, To: to,
		Phase: metapb.SlotMovePhase_SLOT_MOVE_PHASE_SEAL})
	slices.SortFunc(f.shardMap.SlotMoves, func(a, b *metapb.SlotMove) int { return cmp.Compare(a.GetId(), b.GetId()) })
	f.shardMap.NextSlotMoveId = id + 1
	f.shardMap.Version++
	return &metapb.Result{}
}

func (f *FSM) abortSlotMove(c *metapb.AbortSlotMove) *metapb.Result {
	if f.shardMap == nil {
		return refusal("no shard map is placed")
	}
	i := slices.IndexFunc(f.shardMap.GetSlotMoves(), func(m *metapb.SlotMove) bool { return m.GetId() == c.GetId() })
	if i < 0 {
		if c.GetId() > 0 && c.GetId() < f.nextSlotMoveID() {
			return &metapb.Result{} // dropped already: a retried abort
		}
		return refusal("no slot move %d is recorded", c.GetId())
	}
	if mv := f.shardMap.GetSlotMoves()[i]; mv.GetPhase() != metapb.SlotMovePhase_SLOT_MOVE_PHASE_SEAL {
		return refusal("slot move %d is at %s: the table routes its slots to shard %d already, so it can only finish", c.GetId(), SlotPhaseName(mv.GetPhase()), mv.GetTo())
	}
	f.shardMap.SlotMoves = slices.Delete(f.shardMap.SlotMoves, i, i+1)
	f.shardMap.Version++
	return &metapb.Result{}
}

func (f *FSM) forgetSlotMove(c *metapb.ForgetSlotMove, nowMs int64) *metapb.Result {
	if f.shardMap == nil {
		return refusal("no shard map is placed")
	}
	i := slices.IndexFunc(f.shardMap.GetSlotMoves(), func(m *metapb.SlotMove) bool { return m.GetId() == c.GetId() })
	if i < 0 {
		return &metapb.Result{} // forgotten already, or never recorded: nothing to forget
	}
	mv := f.shardMap.GetSlotMoves()[i]
	switch {
	case mv.GetPhase() != metapb.SlotMovePhase_SLOT_MOVE_PHASE_DONE:
		return refusal("slot move %d is at %s; only a done move is forgotten", c.GetId(), SlotPhaseName(mv.GetPhase()))
	case nowMs < mv.GetDedupUntilMs():
		// Routers still ask from about dedup keys of these slots.
		return refusal("slot move %d: its dedup window runs %d ms more", c.GetId(), mv.GetDedupUntilMs()-nowMs)
	}
	f.shardMap.SlotMoves = slices.Delete(f.shardMap.SlotMoves, i, i+1)
	f.shardMap.Version++
	return &metapb.Result{}
}

// slotCount is the map's slot count, recorded or implied (ShardMap.Table).
func (f *FSM) slotCount() uint32 { return f.table().Slots }

// table is the map's slot table as ShardMap.Table reads it; its Owners
// alias the map's.
func (f *FSM) table() wire.SlotTable {
	t := wire.SlotTable{Slots: f.shardMap.GetSlots()}
	if t.Slots == 0 {
		t.Slots = f.shardMap.GetCount() * wire.SlotsPerShard
	}
	if len(f.shardMap.GetSlotOwners()) > 0 {
		t.Owners = f.shardMap.GetSlotOwners()
	}
	return t
}

// slotsOwnedBy reports whether shard owns every one of slots.
func (f *FSM) slotsOwnedBy(slots []uint32, shard uint32) bool {
	t := f.table()
	for _, s := range slots {
		if s >= t.Slots || t.Owner(s) != shard {
			return false
		}
	}
	return true
}

// materializeSlots records the slot count and the explicit owner of every
// slot, in the layout the map routes by now (the bootstrap layout while
// none is recorded); a map that records them already is left alone.
func (f *FSM) materializeSlots() {
	if len(f.shardMap.GetSlotOwners()) > 0 {
		return
	}
	t := f.table()
	owners := make([]uint32, t.Slots)
	for s := range owners {
		owners[s] = t.Owner(uint32(s))
	}
	f.shardMap.Slots = t.Slots
	f.shardMap.SlotOwners = owners
}

func (f *FSM) nextSlotMoveID() uint64 { return max(f.shardMap.GetNextSlotMoveId(), 1) }
