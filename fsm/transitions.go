package fsm

import "github.com/raftq/raftq/fsm/fsmpb"

// Every state change of a message goes through change or remove, which keep
// the indexes and counts in step with msg.state:
//
//	READY    q.ready (standard: all; FIFO: heads of groups not held), s.retention
//	DELAYED  s.delayed, s.retention
//	LEASED   s.leases
//	DEAD     q.dead
//	ACKED    s.completed, q.results (with a result)
//
// plus q.members and s.byID for every state, and q.groups for the live
// states (READY, DELAYED, LEASED) of a FIFO queue.

func live(st fsmpb.State) bool {
	return st == fsmpb.State_STATE_READY || st == fsmpb.State_STATE_DELAYED || st == fsmpb.State_STATE_LEASED
}

func (s *state) inGroups(m *msg) bool { return m.q.fifo() && live(m.state) }

// detach removes m from the index of its current state.
func (s *state) detach(m *msg) {
	q := m.q
	if m.state == fsmpb.State_STATE_LEASED {
		s.leaseEnded(q) // before the counts drop
	}
	if live(m.state) {
		q.liveBytes -= uint64(len(m.body))
		if u := q.tenant; u != nil {
			u.live--
			u.bytes -= uint64(len(m.body))
			if m.state == fsmpb.State_STATE_LEASED {
				u.leased--
			}
		}
	}
	switch m.state {
	case fsmpb.State_STATE_READY:
		q.nReady--
		q.ready.Delete(readyItem{readyKey(m), m.id})
		s.retention.Delete(timeItem{m.expireMs, m.id})
	case fsmpb.State_STATE_DELAYED:
		q.nDelayed--
		s.delayed.Delete(timeItem{m.availableMs, m.id})
		s.retention.Delete(timeItem{m.expireMs, m.id})
	case fsmpb.State_STATE_LEASED:
		q.nLeased--
		s.leases.Delete(timeItem{m.leaseDeadline, m.id})
	case fsmpb.State_STATE_DEAD:
		q.nDead--
		q.dead.Delete(timeItem{m.stateChangedMs, m.id})
		s.unindexDeadExpiry(m)
	case fsmpb.State_STATE_ACKED:
		q.nAcked--
		s.completed.Delete(timeItem{m.expireMs, m.id})
		s.detachResult(m)
	}
}

// attach adds m to the index of its current state.
func (s *state) attach(m *msg) {
	q := m.q
	if live(m.state) {
		q.liveBytes += uint64(len(m.body))
		if u := q.tenant; u != nil {
			u.live++
			u.bytes += uint64(len(m.body))
			if m.state == fsmpb.State_STATE_LEASED {
				u.leased++
			}
		}
	}
	switch m.state {
	case fsmpb.State_STATE_READY:
		q.nReady++
		if !q.fifo() || s.isHead(m) {
			s.pushReady(m)
		}
		s.retention.ReplaceOrInsert(timeItem{m.expireMs, m.id})
	case fsmpb.State_STATE_DELAYED:
		q.nDelayed++
		s.delayed.ReplaceOrInsert(timeItem{m.availableMs, m.id})
		s.retention.ReplaceOrInsert(timeItem{m.expireMs, m.id})
	case fsmpb.State_STATE_LEASED:
		q.nLeased++
		s.leases.ReplaceOrInsert(timeItem{m.leaseDeadline, m.id})
	case fsmpb.State_STATE_DEAD:
		q.nDead++
		q.dead.ReplaceOrInsert(timeItem{m.stateChangedMs, m.id})
		s.indexDeadExpiry(m)
	case fsmpb.State_STATE_ACKED:
		q.nAcked++
		s.completed.ReplaceOrInsert(timeItem{m.expireMs, m.id})
		s.attachResult(m)
	}
}

// pushReady makes m leasable; every message enters queue.ready here. The
// head of a held FIFO group (holds.go) stays out until its release.
func (s *state) pushReady(m *msg) {
	if m.q.fifo() && s.held(m.q.name, m.group) {
		return
	}
	m.q.ready.ReplaceOrInsert(readyItem{readyKey(m), m.id})
	if s.touched != nil {
		s.touched[m.q.name] = struct{}{}
	}
}

// groupHead is the first live message of a FIFO group.
func (s *state) groupHead(q *queue, group string) (groupItem, bool) {
	var head groupItem
	found := false
	q.groups.AscendGreaterOrEqual(groupItem{group: group}, func(it groupItem) bool {
		if it.group == group {
			head, found = it, true
		}
		return false
	})
	return head, found
}

func (s *state) isHead(m *msg) bool {
	h, ok := s.groupHead(m.q, m.group)
	return ok && h.id == m.id
}

// refreshHead makes the group's head leasable if it is ready; called after a
// message left the group, which may have been the head.
func (s *state) refreshHead(q *queue, group string) {
	h, ok := s.groupHead(q, group)
	if !ok {
		return
	}
	if m, ok := s.get(h.id); ok && m.state == fsmpb.State_STATE_READY {
		s.pushReady(m)
	}
}

func (s *state) joinGroup(m *msg) {
	m.q.groups.ReplaceOrInsert(groupItem{m.group, m.seq, m.id})
	m.q.groupSize[m.group]++
}

func (s *state) leaveGroup(m *msg) {
	q := m.q
	q.groups.Delete(groupItem{m.group, m.seq, m.id})
	if n := q.groupSize[m.group]; n <= 1 {
		delete(q.groupSize, m.group)
	} else {
		q.groupSize[m.group] = n - 1
	}
}

// change moves m to state `to`, letting fn set the fields the new state's
// index keys on (fn runs after m left its old index). It returns the owned
// record, which callers must use from then on.
func (s *state) change(m *msg, to fsmpb.State, fn func(m *msg)) *msg {
	m = s.own(m)
	if live(m.state) && !live(to) {
		s.releaseUnique(m)
	}
	s.detach(m)
	wasGrouped := s.inGroups(m)
	if wasGrouped && !live(to) {
		s.leaveGroup(m)
	}
	if fn != nil {
		fn(m)
	}
	m.state = to
	m.stateChangedMs = s.clock
	if !wasGrouped && s.inGroups(m) {
		s.joinGroup(m)
	}
	s.attach(m)
	if wasGrouped && !live(to) {
		s.refreshHead(m.q, m.group)
	}
	return m
}

// remove deletes m from the shard entirely.
func (s *state) remove(m *msg) {
	if live(m.state) {
		s.releaseUnique(m)
	}
	s.detach(m)
	grouped := s.inGroups(m)
	if grouped {
		s.leaveGroup(m)
	}
	m.q.members.Delete(m.id)
	s.byID.Delete(msgRef{id: m.id})
	if grouped {
		s.refreshHead(m.q, m.group)
	}
}

// insert adds a new message in the state already set on m.
func (s *state) insert(m *msg) {
	m.gen = s.gen
	s.byID.ReplaceOrInsert(msgRef{m.id, m})
	m.q.members.ReplaceOrInsert(m.id)
	if s.inGroups(m) {
		s.joinGroup(m)
	}
	s.attach(m)
}

// kill moves m to the DLQ, or drops it (counted) when the queue has no DLQ.
func (s *state) kill(m *msg, reason fsmpb.Reason) {
	switch reason {
	case fsmpb.Reason_REASON_MAX_RECEIVES:
		s.moved(m.q.name, MoveDeadLettered)
	case fsmpb.Reason_REASON_POISON:
		s.moved(m.q.name, MoveDeadLetteredByCli)
	case fsmpb.Reason_REASON_RETENTION:
		if m.q.isTopic() {
			// A topic's retained publication leaves when its time is up;
			// it was never a job.
			s.remove(m)
			return
		}
		s.moved(m.q.name, MoveExpired)
	}
	if m.q.policy.GetDlqDisabled() {
		m.q.dropped++
		s.counters.Dropped++
		s.remove(m)
		return
	}
	s.change(m, fsmpb.State_STATE_DEAD, func(m *msg) { m.deadReason = reason })
}

// endAttempt closes the history entry of m's current lease. m must be owned.
func (s *state) endAttempt(m *msg, outcome fsmpb.Reason, errText string) {
	if n := len(m.history); n > 0 && m.history[n-1].epoch == m.leaseEpoch && m.history[n-1].endedMs == 0 && m.history[n-1].outcome == fsmpb.Reason_REASON_UNSPECIFIED {
		m.history[n-1].endedMs = s.clock
		m.history[n-1].outcome = outcome
		m.history[n-1].err = errText
	}
	if errText != "" {
		m.lastError = errText
	}
}

func (m *msg) addAttempt(a attempt) {
	if len(m.history) >= MaxHistory {
		copy(m.history, m.history[len(m.history)-MaxHistory+1:])
		m.history = m.history[:MaxHistory-1]
	}
	m.history = append(m.history, a)
}

// expireLease ends a lease whose deadline passed: back to ready, or dead when
// the receive count is used up.
func (s *state) expireLease(m *msg) {
	m = s.own(m)
	s.moved(m.q.name, MoveLeaseExpired)
	s.endAttempt(m, fsmpb.Reason_REASON_EXPIRED, "")
	if m.receiveCount >= m.maxReceives() {
		s.kill(m, fsmpb.Reason_REASON_MAX_RECEIVES)
		return
	}
	s.release(m, 0)
}

// release returns a message whose lease ended to ready (delay 0) or delayed,
// unless its retention has run out meanwhile.
func (s *state) release(m *msg, delay int64) {
	switch {
	case m.expireMs <= s.clock:
		s.kill(m, fsmpb.Reason_REASON_RETENTION)
	case delay == 0:
		s.change(m, fsmpb.State_STATE_READY, nil)
	default:
		s.change(m, fsmpb.State_STATE_DELAYED, func(m *msg) { m.availableMs = s.clock + delay })
	}
}

// liveLease returns the message if (id, epoch) is its current live lease.
func (s *state) liveLease(r *fsmpb.Receipt) (*msg, bool) {
	m, ok := s.get(r.GetMessageId())
	if !ok || m.state != fsmpb.State_STATE_LEASED || m.leaseEpoch != r.GetLeaseEpoch() || m.leaseDeadline <= s.clock {
		return nil, false
	}
	return m, true
}
