package fsm

import "github.com/raftq/raftq/fsm/fsmpb"

// deadOf picks the dead messages a Redrive or DiscardDead names: the listed
// ids that are dead in q and that keep (nil: any) takes (others are
// skipped), or the oldest max that keep takes.
func (s *state) deadOf(q *queue, ids []uint64, max uint32, keep func(*msg) bool) ([]*msg, *fsmpb.Result) {
	if len(ids) > maxRedriveBatch {
		return nil, failed(fsmpb.Code_CODE_INVALID_ARGUMENT, "%d ids in one command, limit %d", len(ids), maxRedriveBatch)
	}
	var out []*msg
	if len(ids) > 0 {
		seen := make(map[uint64]bool, len(ids))
		for _, id := range ids {
			if m, ok := s.get(id); ok && m.q == q && m.state == fsmpb.State_STATE_DEAD && !seen[id] && (keep == nil || keep(m)) {
				seen[id] = true
				out = append(out, m)
			}
		}
		return out, nil
	}
	n := int(max)
	if n == 0 || n > maxRedriveBatch {
		n = maxRedriveBatch
	}
	q.dead.Ascend(func(it timeItem) bool {
		if m, _ := s.get(it.id); keep == nil || keep(m) {
			out = append(out, m)
		}
		return len(out) < n
	})
	return out, nil
}

// redrive moves dead messages back to ready, at the back of the queue (a new
// sequence), with a fresh receive count and retention period.
func (s *state) redrive(c *fsmpb.Redrive) *fsmpb.Result {
	q, res := s.queueOf(c.GetQueue())
	if res != nil {
		return res
	}
	// A dead message of a FIFO group whose slot this shard sealed stays
	// dead: the slot's new shard may be delivering the group's newer
	// messages, and live here again the group would have a head on two
	// shards (two leases at once, order lost). It is sent again instead
	// (docs/resharding.md).
	keep := func(m *msg) bool { return !q.fifo() || !s.groupSealed(q.name, m.group) }
	ms, res := s.deadOf(q, c.GetMessageIds(), c.GetMax(), keep)
	if res != nil {
		return res
	}
	for _, m := range ms {
		s.moved(q.name, MoveRedriven)
		s.change(m, fsmpb.State_STATE_READY, func(m *msg) {
			m.receiveCount = 0
			m.seq = s.nextSeq
			s.nextSeq++
			m.deadReason = fsmpb.Reason_REASON_UNSPECIFIED
			m.availableMs = s.clock
			m.expireMs = s.clock + q.policy.GetRetentionMs()
			m.addAttempt(attempt{endedMs: s.clock, outcome: fsmpb.Reason_REASON_REDRIVEN})
		})
	}
	return countResult(uint64(len(ms)))
}

func (s *state) discardDead(c *fsmpb.DiscardDead) *fsmpb.Result {
	q, res := s.queueOf(c.GetQueue())
	if res != nil {
		return res
	}
	ms, res := s.deadOf(q, c.GetMessageIds(), c.GetMax(), nil)
	if res != nil {
		return res
	}
	for _, m := range ms {
		s.remove(m)
	}
	s.counters.Discarded += uint64(len(ms))
	return countResult(uint64(len(ms)))
}
