package fsm

import (
	"cmp"
	"slices"

	"github.com/raftq/raftq/fsm/fsmpb"
)

// Held groups: the receiving half of a slot move (docs/resharding.md). The
// shard a move takes slots from still holds older messages of the moved
// FIFO groups, so the shard they move to takes new messages of those groups
// but leases none of them until the move releases the group: one lease per
// group, and the old shard's messages go first. A held group's head stays
// out of queue.ready (pushReady), which is all a Receive leases from; a
// group may be held before its queue or any of its messages exist here.

// holdItem is one hold of a (queue, group) by a move. A group stays held
// while any move holds it.
type holdItem struct {
	queue, group string
	move         uint64
	from         uint32 // the shard the move takes the group from
}

func lessHold(a, b holdItem) bool {
	if a.queue != b.queue {
		return a.queue < b.queue
	}
	if a.group != b.group {
		return a.group < b.group
	}
	return a.move < b.move
}

// held reports whether any move holds the group.
func (s *state) held(queue, group string) bool {
	if s.holds.Len() == 0 {
		return false
	}
	found := false
	s.holds.AscendGreaterOrEqual(holdItem{queue: queue, group: group}, func(h holdItem) bool {
		found = h.queue == queue && h.group == group
		return false
	})
	return found
}

// holdGroups holds the items for a move; the count is the holds added.
func (s *state) holdGroups(c *fsmpb.HoldGroups) *fsmpb.Result {
	if err := ValidateHoldGroups(c); err != nil {
		return &fsmpb.Result{Status: invalid(err)}
	}
	var n uint64
	for _, it := range c.GetItems() {
		wasHeld := s.held(it.GetQueue(), it.GetGroup())
		if _, dup := s.holds.ReplaceOrInsert(holdItem{queue: it.GetQueue(), group: it.GetGroup(), move: c.GetMoveId(), from: c.GetFromShard()}); dup {
			continue
		}
		n++
		if !wasHeld {
			s.unreadyHead(it.GetQueue(), it.GetGroup())
		}
	}
	return countResult(n)
}

// unreadyHead takes a group's head out of queue.ready once the group is
// held. A head already leased keeps its lease: a hold stops new leases only.
func (s *state) unreadyHead(queue, group string) {
	q, ok := s.queues[queue]
	if !ok || !q.fifo() {
		return
	}
	h, ok := s.groupHead(q, group)
	if !ok {
		return
	}
	if m, ok := s.get(h.id); ok && m.state == fsmpb.State_STATE_READY {
		q.ready.Delete(readyItem{readyKey(m), m.id})
	}
}

// releaseGroups drops holds of a move: the items, or all of the move's.
// A group no move holds any more has its head made leasable, which wakes
// waiting receivers (Options.Notify). The count is the holds dropped.
func (s *state) releaseGroups(c *fsmpb.ReleaseGroups) *fsmpb.Result {
	if err := ValidateReleaseGroups(c); err != nil {
		return &fsmpb.Result{Status: invalid(err)}
	}
	var drop []holdItem
	if c.GetAll() {
		s.holds.Ascend(func(h holdItem) bool {
			if h.move == c.GetMoveId() {
				drop = append(drop, h)
			}
			return true
		})
	} else {
		for _, it := range c.GetItems() {
			drop = append(drop, holdItem{queue: it.GetQueue(), group: it.GetGroup(), move: c.GetMoveId()})
		}
	}
	return countResult(s.dropHolds(drop))
}

// dropHolds deletes holds and makes the heads of groups no longer held
// leasable; it returns the holds that existed.
func (s *state) dropHolds(drop []holdItem) uint64 {
	var n uint64
	for _, h := range drop {
		if _, ok := s.holds.Delete(h); !ok {
			continue
		}
		n++
		if s.held(h.queue, h.group) {
			continue
		}
		if q, ok := s.queues[h.queue]; ok && q.fifo() {
			s.refreshHead(q, h.group)
		}
	}
	return n
}

// dropQueueHolds drops every hold of a deleted queue, so a queue created
// later under the name starts with none.
func (s *state) dropQueueHolds(queue string) {
	var drop []holdItem
	s.holds.AscendGreaterOrEqual(holdItem{queue: queue}, func(h holdItem) bool {
		if h.queue != queue {
			return false
		}
		drop = append(drop, h)
		return true
	})
	for _, h := range drop {
		s.holds.Delete(h)
	}
}

// MoveHolds is what one slot move holds on this shard.
type MoveHolds struct {
	MoveID uint64
	From   uint32 // the shard the move takes the groups from
	Groups int    // held (queue, group) pairs
}

// Holds counts the held groups of each move, by move id.
func (f *FSM) Holds() []MoveHolds {
	f.mu.RLock()
	defer f.mu.RUnlock()
	by := map[uint64]*MoveHolds{}
	f.s.holds.Ascend(func(h holdItem) bool {
		m, ok := by[h.move]
		if !ok {
			m = &MoveHolds{MoveID: h.move, From: h.from}
			by[h.move] = m
		}
		m.Groups++
		return true
	})
	out := make([]MoveHolds, 0, len(by))
	for _, m := range by {
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b MoveHolds) int { return cmp.Compare(a.MoveID, b.MoveID) })
	return out
}

// HeldGroups lists the groups a move holds on this shard, by queue then
// group.
func (f *FSM) HeldGroups(moveID uint64) []*fsmpb.QueueGroup {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []*fsmpb.QueueGroup
	f.s.holds.Ascend(func(h holdItem) bool {
		if h.move == moveID {
			out = append(out, &fsmpb.QueueGroup{Queue: h.queue, Group: h.group})
		}
		return true
	})
	return out
}

// IsHeld reports whether a move holds the group on this shard.
func (f *FSM) IsHeld(queue, group string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.s.held(queue, group)
}
