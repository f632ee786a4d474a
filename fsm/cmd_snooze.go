package fsm

import "github.com/raftq/raftq/fsm/fsmpb"

// snooze ends live leases and makes their messages ready again after each
// item's delay, giving back the receive each lease took. A worker uses it
// to postpone a job (snooze), to hand jobs back when it shuts down or when
// a job type's circuit is open: none of these is a failed attempt, so none
// may bring the message nearer its dead letter (docs/jobs.md). The
// message's retention still applies, so a job snoozed forever still ends.
func (s *state) snooze(c *fsmpb.Snooze) *fsmpb.Result {
	if n := len(c.GetItems()); n > maxItemsPerLeaseCommandBatch {
		return tooMany(n)
	}
	items := make([]*fsmpb.ItemResult, len(c.GetItems()))
	for i, it := range c.GetItems() {
		if d := it.GetDelayMs(); d < 0 || d > MaxDelayMs {
			items[i] = invalidItem("delay_ms is %d, allowed 0..%d", d, int64(MaxDelayMs))
			continue
		}
		m, ok := s.liveLease(it.GetReceipt())
		if !ok {
			items[i] = s.notLive(it.GetReceipt())
			continue
		}
		m = s.own(m)
		s.endSnoozed(m, truncate(it.GetReason(), MaxErrorLen))
		s.moved(m.q.name, MoveSnoozed)
		if m.receiveCount > 0 {
			m.receiveCount--
		}
		s.release(m, it.GetDelayMs())
		items[i] = &fsmpb.ItemResult{Status: okStatus()}
	}
	return itemsResult(items)
}

// endSnoozed closes the history entry of m's current lease as snoozed. The
// reason goes to the entry only: unlike endAttempt's error text it is not
// the message's last error, which a snooze must not overwrite.
func (s *state) endSnoozed(m *msg, reason string) {
	last := m.lastError
	s.endAttempt(m, fsmpb.Reason_REASON_SNOOZED, reason)
	m.lastError = last
}
