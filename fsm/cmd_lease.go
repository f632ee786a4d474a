package fsm

import (
	"github.com/raftq/raftq/fsm/fsmpb"
)

func invalidItem(format string, args ...any) *fsmpb.ItemResult {
	return &fsmpb.ItemResult{Status: status(fsmpb.Code_CODE_INVALID_ARGUMENT, format, args...)}
}

func tooMany(n int) *fsmpb.Result {
	return failed(fsmpb.Code_CODE_INVALID_ARGUMENT, "%d items in one command, limit %d", n, maxItemsPerLeaseCommandBatch)
}

// ack settles live leases. An ack of a lease that already ended in an ack
// succeeds again, marked already_acked: it is a retry whose first answer was
// lost, and the caller must not take it for a lost message. Any other
// receipt that is not a live lease is refused and says why (notLive).
func (s *state) ack(c *fsmpb.Ack) *fsmpb.Result {
	if n := len(c.GetReceipts()); n > maxItemsPerLeaseCommandBatch {
		return tooMany(n)
	}
	if bad := validateAckResults(c); bad != nil {
		return bad
	}
	items := make([]*fsmpb.ItemResult, len(c.GetReceipts()))
	for i, r := range c.GetReceipts() {
		m, ok := s.liveLease(r)
		if !ok {
			if done, ok := s.get(r.GetMessageId()); ok && ackedWith(done, r.GetLeaseEpoch()) {
				items[i] = ackRepeat()
				continue
			}
			items[i] = s.notLive(r)
			continue
		}
		m = s.own(m)
		s.endAttempt(m, fsmpb.Reason_REASON_ACKED, "")
		s.change(m, fsmpb.State_STATE_ACKED, func(m *msg) {
			m.body = nil
			m.result = ackResult(c, i)
			m.expireMs = s.clock + m.q.policy.GetCompletedRetentionMs()
		})
		s.counters.Acked++
		s.moved(m.q.name, MoveAcked)
		s.evictResults(m.q)
		for s.completed.Len() > MaxCompletedRecords {
			it, _ := s.completed.Min()
			old, _ := s.get(it.id)
			s.remove(old)
		}
		items[i] = &fsmpb.ItemResult{Status: okStatus()}
	}
	return itemsResult(items)
}

func (s *state) nack(ctx *applyCtx, c *fsmpb.Nack) *fsmpb.Result {
	if n := len(c.GetItems()); n > maxItemsPerLeaseCommandBatch {
		return tooMany(n)
	}
	items := make([]*fsmpb.ItemResult, len(c.GetItems()))
	for i, it := range c.GetItems() {
		if it.GetHasDelay() && (it.GetDelayMs() < 0 || it.GetDelayMs() > MaxDelayMs) {
			items[i] = invalidItem("delay_ms is %d, allowed 0..%d", it.GetDelayMs(), int64(MaxDelayMs))
			continue
		}
		m, ok := s.liveLease(it.GetReceipt())
		if !ok {
			items[i] = s.notLive(it.GetReceipt())
			continue
		}
		m = s.own(m)
		s.endAttempt(m, fsmpb.Reason_REASON_NACKED, truncate(it.GetError(), MaxErrorLen))
		s.moved(m.q.name, MoveNacked)
		items[i] = &fsmpb.ItemResult{Status: okStatus()}
		if m.receiveCount >= m.maxReceives() {
			s.kill(m, fsmpb.Reason_REASON_MAX_RECEIVES)
			continue
		}
		delay := it.GetDelayMs()
		if !it.GetHasDelay() {
			base, ceiling := m.backoffBounds()
			delay = backoff(base, ceiling, m.receiveCount, jitter(ctx.seed, ctx.cmdIdx, m.id))
		}
		s.release(m, delay)
	}
	return itemsResult(items)
}

// extend sets a live lease's deadline to clock + visibility_timeout_ms. Zero
// ends the lease now, as if it had expired (SQS ChangeMessageVisibility 0).
func (s *state) extend(c *fsmpb.Extend) *fsmpb.Result {
	if n := len(c.GetItems()); n > maxItemsPerLeaseCommandBatch {
		return tooMany(n)
	}
	items := make([]*fsmpb.ItemResult, len(c.GetItems()))
	for i, it := range c.GetItems() {
		vis := it.GetVisibilityTimeoutMs()
		if vis < 0 || vis > MaxVisibilityMs {
			items[i] = invalidItem("visibility_timeout_ms is %d, allowed 0..%d", vis, int64(MaxVisibilityMs))
			continue
		}
		m, ok := s.liveLease(it.GetReceipt())
		if !ok {
			items[i] = s.notLive(it.GetReceipt())
			continue
		}
		if vis == 0 {
			s.expireLease(m)
			items[i] = &fsmpb.ItemResult{Status: okStatus(), LeaseDeadlineMs: s.clock}
			continue
		}
		s.setDeadline(m, s.clock+vis)
		s.moved(m.q.name, MoveExtended)
		items[i] = &fsmpb.ItemResult{Status: okStatus(), LeaseDeadlineMs: s.clock + vis}
	}
	return itemsResult(items)
}

func (s *state) setDeadline(m *msg, deadline int64) {
	m = s.own(m)
	s.leases.Delete(timeItem{m.leaseDeadline, m.id})
	m.leaseDeadline = deadline
	s.leases.ReplaceOrInsert(timeItem{m.leaseDeadline, m.id})
}

// deadLetter moves leased messages to the DLQ at once (poison).
func (s *state) deadLetter(c *fsmpb.DeadLetter) *fsmpb.Result {
	if n := len(c.GetItems()); n > maxItemsPerLeaseCommandBatch {
		return tooMany(n)
	}
	items := make([]*fsmpb.ItemResult, len(c.GetItems()))
	for i, it := range c.GetItems() {
		m, ok := s.liveLease(it.GetReceipt())
		if !ok {
			items[i] = s.notLive(it.GetReceipt())
			continue
		}
		m = s.own(m)
		s.endAttempt(m, fsmpb.Reason_REASON_POISON, truncate(it.GetError(), MaxErrorLen))
		s.kill(m, fsmpb.Reason_REASON_POISON)
		items[i] = &fsmpb.ItemResult{Status: okStatus()}
	}
	return itemsResult(items)
}

// leaderGrace extends, once per term, the leases granted in earlier terms that
// would end within grace_ms, so a new leader does not expire leases whose
// holders could not reach anyone during the election. The count is the leases
// extended.
func (s *state) leaderGrace(ctx *applyCtx, c *fsmpb.LeaderGrace) *fsmpb.Result {
	if g := c.GetGraceMs(); g <= 0 || g > MaxVisibilityMs {
		return failed(fsmpb.Code_CODE_INVALID_ARGUMENT, "grace_ms is %d, allowed 1..%d", g, int64(MaxVisibilityMs))
	}
	if sk := c.GetSkewMs(); sk < 0 || sk > MaxVisibilityMs {
		return failed(fsmpb.Code_CODE_INVALID_ARGUMENT, "skew_ms is %d, allowed 0..%d", sk, int64(MaxVisibilityMs))
	}
	// The entry's own term decides which leases are "earlier": the term
	// in the command was read before proposing and may trail it.
	term := max(c.GetTerm(), ctx.term)
	if term <= s.graceTerm {
		return countResult(0)
	}
	s.graceTerm = term
	target := max(s.clock, c.GetBaseMs()) + c.GetGraceMs()
	var ids []uint64
	s.leases.Ascend(func(it timeItem) bool {
		ids = append(ids, it.id)
		return true
	})
	var n uint64
	for _, id := range ids {
		m, _ := s.get(id)
		if m.leaseTerm >= term || m.leaseDeadline <= s.clock {
			continue
		}
		if d := max(target, m.leaseDeadline+c.GetSkewMs()); d != m.leaseDeadline {
			s.setDeadline(m, d)
			n++
		}
	}
	return countResult(n)
}
