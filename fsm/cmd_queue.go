package fsm

import (
	"github.com/raftq/raftq/fsm/fsmpb"
	"google.golang.org/protobuf/proto"
)

// upsertQueue creates a queue or replaces its policy. The mode of a queue
// that holds messages cannot change: its indexes are built for one mode.
func (s *state) upsertQueue(c *fsmpb.UpsertQueue) *fsmpb.Result {
	if err := ValidateQueueName(c.GetQueue()); err != nil {
		return &fsmpb.Result{Status: invalid(err)}
	}
	if err := ValidatePolicy(c.GetPolicy()); err != nil {
		return &fsmpb.Result{Status: invalid(err)}
	}
	p := NormalizePolicy(c.GetPolicy())
	q, ok := s.queues[c.GetQueue()]
	if !ok {
		q := newQueue(c.GetQueue(), p)
		q.tenant = s.useOf(q.name)
		q.firstID = s.nextID
		q.setFilter()
		s.queues[c.GetQueue()] = q
		s.indexSubscriptions()
		if from := p.GetReplayFromMs(); from > 0 {
			return countResult(s.replay(q, from))
		}
		return &fsmpb.Result{Status: okStatus()}
	}
	if p.GetMode() != q.policy.GetMode() && q.members.Len() > 0 {
		return failed(fsmpb.Code_CODE_FAILED_PRECONDITION, "queue %q holds %d messages: its mode cannot change", q.name, q.members.Len())
	}
	if p.GetTopic() != q.policy.GetTopic() || p.GetSubscriptionOf() != q.policy.GetSubscriptionOf() {
		return failed(fsmpb.Code_CODE_FAILED_PRECONDITION, "queue %q: whether it is a topic or a subscription, and of which topic, is fixed when it is created", q.name)
	}
	old := q.policy
	s.setDeadRetention(q, p)
	s.noteResume(q, old.GetPaused())
	if d := p.GetRetentionMs() - old.GetRetentionMs(); d != 0 {
		s.shiftRetention(q, d)
		// A shorter retention applies at once, like at the start of an entry.
		s.expireRetention()
	}
	q.setFilter()
	s.indexSubscriptions()
	s.evictResults(q) // a lower result bound applies at once too
	// A shorter dead retention, likewise.
	s.expireDead()
	return &fsmpb.Result{Status: okStatus()}
}

// shiftRetention moves the retention deadline of the queue's live messages by
// d: the deadline counts from when the message became available.
func (s *state) shiftRetention(q *queue, d int64) {
	for _, id := range s.memberIDs(q) {
		m, _ := s.get(id)
		if !live(m.state) {
			continue
		}
		m = s.own(m)
		indexed := m.state != fsmpb.State_STATE_LEASED
		if indexed {
			s.retention.Delete(timeItem{m.expireMs, m.id})
		}
		m.expireMs += d
		if indexed {
			s.retention.ReplaceOrInsert(timeItem{m.expireMs, m.id})
		}
	}
}

// deleteQueue removes the queue with all its messages and records; the count
// is the messages removed.
func (s *state) deleteQueue(c *fsmpb.DeleteQueue) *fsmpb.Result {
	q, res := s.queueOf(c.GetQueue())
	if res != nil {
		return res
	}
	var n uint64
	for _, id := range s.memberIDs(q) {
		m, _ := s.get(id)
		if m.state != fsmpb.State_STATE_ACKED {
			s.counters.Deleted++
			n++
		}
		s.remove(m)
	}
	// Its dedup keys stay until they expire (finding them would cost a
	// walk over every key of the shard); a new queue of the same name
	// ignores them (queue.firstID).
	delete(s.queues, q.name)
	s.indexSubscriptions()
	s.dropUse(q)
	s.dropQueueHolds(q.name)
	return countResult(n)
}

// purgeQueue deletes the queue's ready and delayed messages; leased ones are
// left to finish. Holds of its groups stay: the shard a held group comes
// from keeps its leased messages through a purge too, and the move
// releases the group once they are gone.
func (s *state) purgeQueue(c *fsmpb.PurgeQueue) *fsmpb.Result {
	q, res := s.queueOf(c.GetQueue())
	if res != nil {
		return res
	}
	var n uint64
	for _, id := range s.memberIDs(q) {
		m, _ := s.get(id)
		if m.state == fsmpb.State_STATE_READY || m.state == fsmpb.State_STATE_DELAYED {
			s.remove(m)
			n++
		}
	}
	s.counters.Purged += n
	return countResult(n)
}

func (s *state) memberIDs(q *queue) []uint64 {
	ids := make([]uint64, 0, q.members.Len())
	q.members.Ascend(func(id uint64) bool { ids = append(ids, id); return true })
	return ids
}

func clonePolicy(p *fsmpb.QueuePolicy) *fsmpb.QueuePolicy {
	return proto.Clone(p).(*fsmpb.QueuePolicy)
}
