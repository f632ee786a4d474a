package fsm

import "github.com/raftq/raftq/fsm/fsmpb"

// Dead retention (QueuePolicy.dead_retention_ms): a dead message of a queue
// that sets it is discarded once it has been dead that long, and counted in
// the queue's dead_expired and Counters.dead_expired. s.deadExpiry holds the
// dead messages of such queues by (death time + retention, id); attach and
// detach keep it in step with q.dead, and upsertQueue re-keys a queue's
// dead messages when its retention changes.

func (s *state) indexDeadExpiry(m *msg) {
	if r := m.q.policy.GetDeadRetentionMs(); r > 0 {
		s.deadExpiry.ReplaceOrInsert(timeItem{m.stateChangedMs + r, m.id})
	}
}

func (s *state) unindexDeadExpiry(m *msg) {
	if r := m.q.policy.GetDeadRetentionMs(); r > 0 {
		s.deadExpiry.Delete(timeItem{m.stateChangedMs + r, m.id})
	}
}

// setDeadRetention changes q's dead retention to p's, re-keying its dead
// messages; it costs the queue's dead count, and only when the value
// changes.
func (s *state) setDeadRetention(q *queue, p *fsmpb.QueuePolicy) {
	if p.GetDeadRetentionMs() == q.policy.GetDeadRetentionMs() {
		q.policy = p
		return
	}
	var ids []uint64
	q.dead.Ascend(func(it timeItem) bool { ids = append(ids, it.id); return true })
	for _, id := range ids {
		m, _ := s.get(id)
		s.unindexDeadExpiry(m)
	}
	q.policy = p
	for _, id := range ids {
		m, _ := s.get(id)
		s.indexDeadExpiry(m)
	}
}

// expireDead discards the dead messages past their queue's dead retention.
func (s *state) expireDead() {
	for {
		it, ok := s.deadExpiry.Min()
		if !ok || it.t > s.clock {
			return
		}
		m, _ := s.get(it.id)
		m.q.deadExpired++
		s.moved(m.q.name, MoveDeadExpired)
		s.counters.DeadExpired++
		s.remove(m)
	}
}

// usesDeadRetention reports whether an upsert needs log format 7: a
// replica of format 6 would keep the dead messages its leader discards.
func usesDeadRetention(u *fsmpb.UpsertQueue) bool {
	return u.GetPolicy().GetDeadRetentionMs() != 0
}
