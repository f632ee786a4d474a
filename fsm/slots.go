package fsm

import (
	"cmp"
	"slices"

	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/wire"
)

// Sealed slots: the sending half of a slot move (growing the shard count,
// docs/resharding.md). Once a shard seals a slot it refuses every new keyed
// message of the slot with CODE_SLOT_MOVED and writes nothing for it, so
// its messages of the slot only ever leave: a FIFO group of the slot that
// shows no live message here at or after the seal has none for good, which
// is what lets the receiving shard release its hold on the group
// (holds.go). Seals stay until an aborted move drops them (UnsealSlots).

// slotSeal is one sealed slot: the move that sealed it and where it goes.
type slotSeal struct {
	move uint64
	to   uint32
}

// SlotSeal is one sealed slot as Seals reports it.
type SlotSeal struct {
	Slot   uint32
	MoveID uint64
	To     uint32
}

// sealedStatus is the item status of a new message whose slot is sealed,
// nil if it may be written. Unkeyed messages have no slot and are never
// refused.
func (s *state) sealedStatus(queue string, nm *fsmpb.NewMessage) *fsmpb.Status {
	if len(s.seals) == 0 {
		return nil
	}
	slot, ok := wire.SlotForMessage(queue, nm.GetGroupId(), nm.GetDedupKey(), s.slotCount)
	if !ok {
		return nil
	}
	sl, ok := s.seals[slot]
	if !ok {
		return nil
	}
	return status(fsmpb.Code_CODE_SLOT_MOVED, "slot %d moved to shard %d (slot move %d): send it through the current slot table", slot, sl.to, sl.move)
}

// groupSealed reports whether the slot of a queue's message group is
// sealed here.
func (s *state) groupSealed(queue, group string) bool {
	if len(s.seals) == 0 || group == "" {
		return false
	}
	if q, ok := s.queues[queue]; ok {
		queue = q.slotQueue()
	}
	slot, _ := wire.SlotForMessage(queue, group, "", s.slotCount)
	_, ok := s.seals[slot]
	return ok
}

// sealSlots seals c.slots for move c.move_id (idempotent; a slot another
// move sealed is taken over) and reports the FIFO groups of those slots
// that still have live messages here.
func (s *state) sealSlots(c *fsmpb.SealSlots) *fsmpb.Result {
	if err := ValidateSealSlots(c); err != nil {
		return &fsmpb.Result{Status: invalid(err)}
	}
	if len(s.seals) > 0 && c.GetSlotCount() != s.slotCount {
		return failed(fsmpb.Code_CODE_FAILED_PRECONDITION, "slot count %d, but this shard's seals use %d: the slot count is fixed for the cluster's life",
			c.GetSlotCount(), s.slotCount)
	}
	s.slotCount = c.GetSlotCount()
	want := make(map[uint32]struct{}, len(c.GetSlots()))
	for _, slot := range c.GetSlots() {
		s.seals[slot] = slotSeal{move: c.GetMoveId(), to: c.GetToShard()}
		want[slot] = struct{}{}
	}
	return &fsmpb.Result{Status: okStatus(), Body: &fsmpb.Result_Seal{Seal: &fsmpb.SealResult{LiveGroups: s.liveGroupsIn(want)}}}
}

// liveGroupsIn lists the FIFO groups with live messages whose slot is in
// slots, by queue then group.
func (s *state) liveGroupsIn(slots map[uint32]struct{}) []*fsmpb.QueueGroup {
	var out []*fsmpb.QueueGroup
	names := make([]string, 0, len(s.queues))
	for n, q := range s.queues {
		// A topic's retained publications are never leased: their order
		// needs no hand-over.
		if q.fifo() && len(q.groupSize) > 0 && !q.isTopic() {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	for _, n := range names {
		q := s.queues[n]
		groups := make([]string, 0, len(q.groupSize))
		for g := range q.groupSize {
			if slot, ok := wire.SlotForMessage(q.slotQueue(), g, "", s.slotCount); ok {
				if _, in := slots[slot]; in {
					groups = append(groups, g)
				}
			}
		}
		slices.Sort(groups)
		for _, g := range groups {
			out = append(out, &fsmpb.QueueGroup{Queue: n, Group: g})
		}
	}
	return out
}

// unsealSlots drops every seal of a move; the count is the slots unsealed.
func (s *state) unsealSlots(c *fsmpb.UnsealSlots) *fsmpb.Result {
	if c.GetMoveId() == 0 {
		return failed(fsmpb.Code_CODE_INVALID_ARGUMENT, "move_id is 0")
	}
	var n uint64
	for slot, sl := range s.seals { // order does not matter: each deletion is independent
		if sl.move == c.GetMoveId() {
			delete(s.seals, slot)
			n++
		}
	}
	if len(s.seals) == 0 {
		s.slotCount = 0
	}
	return countResult(n)
}

// sortedSeals lists the seals by slot.
func (s *state) sortedSeals() []SlotSeal {
	out := make([]SlotSeal, 0, len(s.seals))
	for slot, sl := range s.seals {
		out = append(out, SlotSeal{Slot: slot, MoveID: sl.move, To: sl.to})
	}
	slices.SortFunc(out, func(a, b SlotSeal) int { return cmp.Compare(a.Slot, b.Slot) })
	return out
}

// SealedSlot reports whether this shard has sealed slot, and for which
// move and destination shard.
func (f *FSM) SealedSlot(slot uint32) (moveID uint64, to uint32, ok bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	sl, ok := f.s.seals[slot]
	return sl.move, sl.to, ok
}

// Seals returns the slot count the seals use (0 when there are none) and
// every sealed slot, by slot.
func (f *FSM) Seals() (slotCount uint32, seals []SlotSeal) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.s.slotCount, f.s.sortedSeals()
}

// LookupDedup returns the message a live dedup key of queue names, as an
// enqueue of that key would see it now: not expired at the FSM clock, and
// not left over from a deleted queue of the same name. A slot move's new
// shard asks the old one with it (docs/resharding.md).
func (f *FSM) LookupDedup(queue, key string) (id uint64, ok bool) {
	if key == "" {
		return 0, false
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	q, ok := f.s.queues[queue]
	if !ok {
		return 0, false
	}
	e, ok := f.s.dedup.get(hashDedup(queue, key))
	if !ok || e.expireMs <= f.s.clock || e.id < q.firstID {
		return 0, false
	}
	return e.id, true
}

// LiveGroups returns those of items (FIFO groups) that still have live
// messages (ready, delayed or leased) on this shard, in the order given.
func (f *FSM) LiveGroups(items []*fsmpb.QueueGroup) []*fsmpb.QueueGroup {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []*fsmpb.QueueGroup
	for _, it := range items {
		if q, ok := f.s.queues[it.GetQueue()]; ok && q.groupSize[it.GetGroup()] > 0 {
			out = append(out, &fsmpb.QueueGroup{Queue: it.GetQueue(), Group: it.GetGroup()})
		}
	}
	return out
}
