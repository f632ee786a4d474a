package fsm

import (
	"fmt"

	"github.com/raftq/raftq/fsm/fsmpb"
)

// checkInvariants verifies that every message is in exactly the indexes of
// its state, counts add up and time-keyed indexes hold nothing overdue.
func checkInvariants(f *FSM) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := f.s
	type counts struct{ ready, delayed, leased, dead, acked, members, liveBytes, results, resultBytes uint64 }
	per := map[*queue]*counts{}
	for _, q := range s.queues {
		per[q] = &counts{}
	}
	var err error
	fail := func(format string, args ...any) bool {
		if err == nil {
			err = fmt.Errorf(format, args...)
		}
		return false
	}
	epochs := map[uint64]uint64{}
	leasedInGroup := map[*queue]map[string]uint64{}
	var live uint64
	s.byID.Ascend(func(it msgRef) bool {
		m := it.m
		if m.id != it.id {
			return fail("byID item %d holds message %d", it.id, m.id)
		}
		c, ok := per[m.q]
		if !ok || s.queues[m.q.name] != m.q {
			return fail("message %d belongs to a queue not in the shard", m.id)
		}
		if m.id == 0 || m.id >= s.nextID || m.seq >= s.nextSeq {
			return fail("message %d seq %d beyond counters %d/%d", m.id, m.seq, s.nextID, s.nextSeq)
		}
		if !m.q.members.Has(m.id) {
			return fail("message %d not in members of %q", m.id, m.q.name)
		}
		c.members++
		if len(m.result) > 0 {
			if m.state != fsmpb.State_STATE_ACKED {
				return fail("message %d in state %v holds a result", m.id, m.state)
			}
			if !m.q.results.Has(timeItem{m.stateChangedMs, m.id}) {
				return fail("acked message %d with a result not in its queue's result index", m.id)
			}
			c.results++
			c.resultBytes += uint64(len(m.result))
		}
		if isLive(m.state) {
			c.liveBytes += uint64(len(m.body))
		}
		if len(m.history) > MaxHistory {
			return fail("message %d history %d > %d", m.id, len(m.history), MaxHistory)
		}
		const (
			ixRetention = iota
			ixDelayed
			ixLeases
			ixDead
			ixCompleted
			ixReady
			ixGroup
			ixCount
		)
		names := [ixCount]string{"retention", "delayed", "leases", "dead", "completed", "ready", "group"}
		got := [ixCount]bool{
			s.retention.Has(timeItem{m.expireMs, m.id}),
			s.delayed.Has(timeItem{m.availableMs, m.id}),
			s.leases.Has(timeItem{m.leaseDeadline, m.id}),
			m.q.dead.Has(timeItem{m.stateChangedMs, m.id}),
			s.completed.Has(timeItem{m.expireMs, m.id}),
			m.q.ready.Has(readyItem{readyKey(m), m.id}),
			m.q.groups.Has(groupItem{m.group, m.seq, m.id}),
		}
		var want [ixCount]bool
		switch m.state {
		case fsmpb.State_STATE_READY:
			c.ready++
			live++
			want[ixRetention] = true
			want[ixReady] = !m.q.fifo() || s.isHead(m) && !s.held(m.q.name, m.group)
			if m.expireMs <= s.clock {
				return fail("ready message %d past retention %d <= %d", m.id, m.expireMs, s.clock)
			}
		case fsmpb.State_STATE_DELAYED:
			c.delayed++
			live++
			want[ixRetention], want[ixDelayed] = true, true
			if m.availableMs <= s.clock {
				return fail("delayed message %d overdue %d <= %d", m.id, m.availableMs, s.clock)
			}
		case fsmpb.State_STATE_LEASED:
			c.leased++
			live++
			want[ixLeases] = true
			if m.leaseDeadline <= s.clock {
				return fail("lease of %d overdue %d <= %d", m.id, m.leaseDeadline, s.clock)
			}
			if m.leaseEpoch == 0 || m.leaseEpoch > s.leaseEpoch {
				return fail("lease of %d epoch %d beyond %d", m.id, m.leaseEpoch, s.leaseEpoch)
			}
			if other, dup := epochs[m.leaseEpoch]; dup {
				return fail("messages %d and %d share lease epoch %d", other, m.id, m.leaseEpoch)
			}
			epochs[m.leaseEpoch] = m.id
			if m.q.fifo() {
				if leasedInGroup[m.q] == nil {
					leasedInGroup[m.q] = map[string]uint64{}
				}
				if other, dup := leasedInGroup[m.q][m.group]; dup {
					return fail("FIFO group %q/%q has two in flight: %d and %d", m.q.name, m.group, other, m.id)
				}
				leasedInGroup[m.q][m.group] = m.id
				if !s.isHead(m) {
					return fail("FIFO message %d leased but not the head of group %q", m.id, m.group)
				}
			}
		case fsmpb.State_STATE_DEAD:
			c.dead++
			live++
			want[ixDead] = true
		case fsmpb.State_STATE_ACKED:
			c.acked++
			want[ixCompleted] = true
			if m.body != nil {
				return fail("acked message %d kept its body", m.id)
			}
		default:
			return fail("message %d in state %v", m.id, m.state)
		}
		want[ixGroup] = m.q.fifo() && isLive(m.state)
		for k := range got {
			if got[k] != want[k] {
				return fail("message %d state %v: in %s index = %v, want %v", m.id, m.state, names[k], got[k], want[k])
			}
		}
		return true
	})
	if err != nil {
		return err
	}
	// Each tenant's usage is the sum of its queues' counts.
	tenants := map[string]*tenantUse{}
	for q, c := range per {
		tn := TenantOf(q.name)
		if tn == "" {
			if q.tenant != nil {
				return fmt.Errorf("queue %q of no tenant has a tenant record", q.name)
			}
			continue
		}
		if q.tenant != s.tenants[tn] {
			return fmt.Errorf("queue %q does not count in its tenant's record", q.name)
		}
		u := tenants[tn]
		if u == nil {
			u = &tenantUse{}
			tenants[tn] = u
		}
		u.queues++
		u.live += c.ready + c.delayed + c.leased
		u.bytes += c.liveBytes
		u.leased += c.leased
	}
	if len(tenants) != len(s.tenants) {
		return fmt.Errorf("%d tenant records, %d tenants with queues", len(s.tenants), len(tenants))
	}
	for tn, want := range tenants {
		if got := s.tenants[tn]; *got != *want {
			return fmt.Errorf("tenant %q usage %+v, its queues hold %+v", tn, *got, *want)
		}
	}
	var tot counts
	var shardResults uint64
	shardRecords := 0
	for q, c := range per {
		if c.ready != q.nReady || c.delayed != q.nDelayed || c.leased != q.nLeased || c.dead != q.nDead || c.acked != q.nAcked {
			return fmt.Errorf("queue %q counts r%d d%d l%d x%d a%d, records r%d d%d l%d x%d a%d", q.name,
				q.nReady, q.nDelayed, q.nLeased, q.nDead, q.nAcked, c.ready, c.delayed, c.leased, c.dead, c.acked)
		}
		if uint64(q.results.Len()) != c.results || q.resultBytes != c.resultBytes {
			return fmt.Errorf("queue %q: result index %d records %d bytes; records hold %d, %d bytes", q.name, q.results.Len(), q.resultBytes, c.results, c.resultBytes)
		}
		shardResults += q.resultBytes
		shardRecords += q.results.Len()
		if q.resultBytes > completedMaxBytes(q.policy) {
			return fmt.Errorf("queue %q: %d result bytes kept, bound %d", q.name, q.resultBytes, completedMaxBytes(q.policy))
		}
		if c.liveBytes != q.liveBytes {
			return fmt.Errorf("queue %q: %d live body bytes counted, records hold %d", q.name, q.liveBytes, c.liveBytes)
		}
		if uint64(q.members.Len()) != c.members || uint64(q.dead.Len()) != c.dead {
			return fmt.Errorf("queue %q: %d members, %d dead indexed; records %d, %d dead", q.name, q.members.Len(), q.dead.Len(), c.members, c.dead)
		}
		if q.fifo() {
			if uint64(q.groups.Len()) != c.ready+c.delayed+c.leased {
				return fmt.Errorf("queue %q: %d in groups, %d live", q.name, q.groups.Len(), c.ready+c.delayed+c.leased)
			}
			var sum uint32
			for _, n := range q.groupSize {
				sum += n
			}
			if int(sum) != q.groups.Len() {
				return fmt.Errorf("queue %q: group sizes sum %d, index %d", q.name, sum, q.groups.Len())
			}
		} else if uint64(q.ready.Len()) != c.ready || q.groups.Len() != 0 {
			return fmt.Errorf("queue %q: ready index %d, ready %d, groups %d", q.name, q.ready.Len(), c.ready, q.groups.Len())
		}
		tot.ready += c.ready
		tot.delayed += c.delayed
		tot.leased += c.leased
		tot.acked += c.acked
	}
	if uint64(s.retention.Len()) != tot.ready+tot.delayed || uint64(s.delayed.Len()) != tot.delayed ||
		uint64(s.leases.Len()) != tot.leased || uint64(s.completed.Len()) != tot.acked {
		return fmt.Errorf("global index sizes retention %d delayed %d leases %d completed %d; records r%d d%d l%d a%d",
			s.retention.Len(), s.delayed.Len(), s.leases.Len(), s.completed.Len(), tot.ready, tot.delayed, tot.leased, tot.acked)
	}
	retainedDead := 0
	for _, q := range s.queues {
		r := q.policy.GetDeadRetentionMs()
		if r == 0 {
			continue
		}
		retainedDead += q.dead.Len()
		q.dead.Ascend(func(it timeItem) bool {
			if !s.deadExpiry.Has(timeItem{it.t + r, it.id}) {
				fail("dead message %d of %q not in the dead expiry index", it.id, q.name)
			}
			if it.t+r <= s.clock {
				fail("dead message %d of %q past its dead retention", it.id, q.name)
			}
			return true
		})
	}
	if s.deadExpiry.Len() != retainedDead {
		return fmt.Errorf("dead expiry index %d, dead messages of retaining queues %d", s.deadExpiry.Len(), retainedDead)
	}
	if s.completed.Len() > MaxCompletedRecords {
		return fmt.Errorf("%d completed records, limit %d", s.completed.Len(), MaxCompletedRecords)
	}
	c := s.counters
	gone := c.Acked + c.Discarded + c.Purged + c.Cancelled + c.Dropped + c.Deleted + c.DeadExpired
	if c.Enqueued < gone || c.Enqueued-gone != live {
		return fmt.Errorf("counters %v: enqueued - gone = %d - %d, live messages %d", c, c.Enqueued, gone, live)
	}
	if (len(s.seals) == 0) != (s.slotCount == 0) {
		return fmt.Errorf("%d seals with slot count %d", len(s.seals), s.slotCount)
	}
	for slot, sl := range s.seals {
		if slot >= s.slotCount || sl.move == 0 {
			return fmt.Errorf("seal of slot %d (count %d) by move %d", slot, s.slotCount, sl.move)
		}
	}
	s.holds.Ascend(func(h holdItem) bool {
		if h.move == 0 || h.group == "" {
			return fail("hold %+v", h)
		}
		if q, ok := s.queues[h.queue]; ok && q.fifo() {
			if head, ok := s.groupHead(q, h.group); ok && q.ready.Has(readyItem{readyKey(mustGet(s, head.id)), head.id}) {
				return fail("held group %s/%s has its head %d leasable", h.queue, h.group, head.id)
			}
		}
		return true
	})
	if err != nil {
		return err
	}
	if shardResults != s.resultBytes || shardRecords != s.results.Len() || s.resultBytes > s.resultCap {
		return fmt.Errorf("shard results: index %d records %d bytes (cap %d); queues hold %d, %d bytes",
			s.results.Len(), s.resultBytes, s.resultCap, shardRecords, shardResults)
	}
	if s.dedup.len() != s.dedupExpiry.Len() {
		return fmt.Errorf("dedup %d keys, %d expiries", s.dedup.len(), s.dedupExpiry.Len())
	}
	s.dedupExpiry.Ascend(func(e dedupExpiry) bool {
		if e.t <= s.clock {
			return fail("dedup %x expired %d <= %d", e.h, e.t, s.clock)
		}
		if ref, ok := s.dedup.get(e.h); !ok || ref.id != e.id || ref.expireMs != e.t {
			return fail("dedup %x: index %+v, expiry (%d, %d)", e.h, ref, e.t, e.id)
		}
		if e.t == heldUntilDone {
			// Held only while its message is live: it must be.
			if m, ok := s.get(e.id); !ok || !isLive(m.state) || !m.uniqueUntilDone {
				return fail("dedup %x held until message %d is done, which is gone or done", e.h, e.id)
			}
		}
		return true
	})
	return err
}

func isLive(st fsmpb.State) bool { return live(st) }

func mustGet(s *state, id uint64) *msg {
	m, _ := s.get(id)
	return m
}
