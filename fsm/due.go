package fsm

import "github.com/raftq/raftq/fsm/fsmpb"

// processDue applies everything whose time has come at the current clock, in
// a fixed order (delays, leases, retention, completed records, dedup keys),
// each by (time, id). It runs at the start of every entry, so a Tick is only
// a clock advance. It returns the number of messages that changed state.
func (s *state) processDue() uint64 {
	var n uint64
	for {
		it, ok := s.delayed.Min()
		if !ok || it.t > s.clock {
			break
		}
		m, _ := s.get(it.id)
		s.change(m, fsmpb.State_STATE_READY, nil)
		n++
	}
	for {
		it, ok := s.leases.Min()
		if !ok || it.t > s.clock {
			break
		}
		m, _ := s.get(it.id)
		s.expireLease(m)
		n++
	}
	n += s.expireRetention()
	s.expireDead()
	for {
		it, ok := s.completed.Min()
		if !ok || it.t > s.clock {
			break
		}
		m, _ := s.get(it.id)
		s.remove(m)
	}
	for {
		it, ok := s.dedupExpiry.Min()
		if !ok || it.t > s.clock {
			break
		}
		s.dropDedup(it.h)
	}
	return n
}

// expireRetention dead-letters ready and delayed messages past retention.
func (s *state) expireRetention() uint64 {
	var n uint64
	for {
		it, ok := s.retention.Min()
		if !ok || it.t > s.clock {
			return n
		}
		m, _ := s.get(it.id)
		s.kill(m, fsmpb.Reason_REASON_RETENTION)
		n++
	}
}

// nextDue is when processDue next has work that changes what consumers see.
// Completed records and dedup keys are left out: they expire lazily (look-ups
// check the expiry) and do not need a Tick of their own.
func (s *state) nextDue() (int64, bool) {
	var best int64
	found := false
	// Dead expiry is in: nothing else would bring a quiet shard to discard
	// (and count) what its retention says has gone.
	for _, t := range []interface{ Min() (timeItem, bool) }{s.delayed, s.leases, s.retention, s.deadExpiry} {
		if it, ok := t.Min(); ok && (!found || it.t < best) {
			best, found = it.t, true
		}
	}
	return best, found
}

func (s *state) addDedup(h dedupHash, id uint64, expireMs int64) {
	s.dedup.put(h, dedupRef{id: id, expireMs: expireMs})
	s.dedupExpiry.ReplaceOrInsert(dedupExpiry{t: expireMs, id: id, h: h})
}

func (s *state) dropDedup(h dedupHash) {
	if e, ok := s.dedup.del(h); ok {
		s.dedupExpiry.Delete(dedupExpiry{t: e.expireMs, id: e.id})
	}
}
