package shard

import (
	"context"

	"google.golang.org/protobuf/proto"

	"github.com/raftq/raftq/fsm/fsmpb"
)

// Claim leases up to r.Max messages of r.Queue without waiting. It
// proposes only while the queue holds more leasable messages than the
// receives already in flight on this leader asked for (see claim);
// otherwise it answers empty at once. An empty result is a normal
// outcome. Only on the leader. Long polls are the router's: it waits with
// Wait, which leases nothing, and claims after it wakes.
func (s *Shard) Claim(ctx context.Context, r *fsmpb.Receive) (*fsmpb.Result, error) {
	// The leadership gate Propose applies, before the claim check reads
	// the FSM: a follower (or a leader that lost its term) answers with
	// the hint, not with "nothing here".
	if err := s.waitReady(ctx); err != nil {
		return nil, err
	}
	release, n, ok := s.claim(r.GetQueue(), r.GetMax())
	if !ok {
		if st := s.fsm.InFlightRefusal(r.GetQueue()); st != nil {
			// Messages wait, but the queue or its tenant is at its
			// in-flight quota (docs/tenancy.md): say so, as Apply would.
			return &fsmpb.Result{Status: st}, nil
		}
		return emptyReceive(), nil
	}
	defer release()
	if n < r.GetMax() {
		// Lease what was claimed, not what arrives meanwhile: that is for
		// the receives behind this one.
		r = proto.Clone(r).(*fsmpb.Receive)
		r.Max = n
	}
	return s.Propose(ctx, &fsmpb.Command{Cmd: &fsmpb.Command_Receive{Receive: r}})
}

// Wait blocks until the queue has leasable messages on this leader that no
// receive in flight has claimed, ctx ends, or this replica stops leading.
// It leases nothing: the router uses it to long-poll many shards at once
// and then claims from the one that woke, so an abandoned wait never
// strands a lease.
func (s *Shard) Wait(ctx context.Context, queue string) error {
	if err := s.waitReady(ctx); err != nil {
		return err
	}
	wake, unwatch := s.watch(queue)
	defer unwatch()
	for {
		// Interest is registered before the check, so a notification
		// between the check and the select is kept, not lost.
		if s.unclaimed(queue) {
			return nil
		}
		select {
		case <-wake:
			if !s.IsLeader() {
				return s.notLeader()
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-s.closing:
			return ErrShutdown
		}
	}
}

func emptyReceive() *fsmpb.Result {
	return &fsmpb.Result{Body: &fsmpb.Result_Receive{Receive: &fsmpb.ReceiveResult{}}}
}

// claim reserves want messages of queue for a receive about to be proposed,
// and refuses while the receives in flight on this leader already ask for
// every message the queue can lease now. Such a receive could only commit
// empty, a raft round on every replica for nothing: without the claim,
// every consumer long-polling a queue woke for each enqueue and proposed,
// so a message cost a receive command per consumer. The release wakes the
// queue's waiters to look again at what the finished receive left.
//
// It only decides whether to propose; leases are still granted by the FSM
// alone, so a stale count can delay a receive, never lease twice. A queue
// this replica does not hold passes, for the FSM to refuse it.
//
// It claims n, at most want and no more than is leasable and unclaimed, and
// the receive asks the FSM for n. Claiming all of want whatever was there
// would make receives take turns: one in flight would reserve its full
// batch, and the next could not propose until that many more had arrived,
// so receive calls would wait far longer than their messages did.
func (s *Shard) claim(queue string, want uint32) (release func(), n uint32, ok bool) {
	leasable, known := s.fsm.Leasable(queue)
	n = max(want, 1)
	s.waitMu.Lock()
	defer s.waitMu.Unlock()
	if known {
		taken := s.claimed[queue]
		if leasable <= taken {
			return nil, 0, false
		}
		n = uint32(min(uint64(n), leasable-taken))
	}
	s.claimed[queue] += uint64(n)
	return func() {
		s.waitMu.Lock()
		defer s.waitMu.Unlock()
		if s.claimed[queue] -= uint64(n); s.claimed[queue] == 0 {
			delete(s.claimed, queue)
		}
		for ch := range s.waiters[queue] {
			kick(ch)
		}
	}, n, true
}

// unclaimed reports whether queue holds leasable messages that no receive
// in flight has asked for.
func (s *Shard) unclaimed(queue string) bool {
	leasable, known := s.fsm.Leasable(queue)
	if !known {
		return false
	}
	s.waitMu.Lock()
	defer s.waitMu.Unlock()
	return leasable > s.claimed[queue]
}

// watch registers interest in queue. The channel holds one pending wake-up,
// so a notification between two selects is kept, never lost.
func (s *Shard) watch(queue string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	s.waitMu.Lock()
	m := s.waiters[queue]
	if m == nil {
		m = make(map[chan struct{}]struct{})
		s.waiters[queue] = m
	}
	m[ch] = struct{}{}
	s.waitMu.Unlock()
	return ch, func() {
		s.waitMu.Lock()
		delete(m, ch)
		if len(m) == 0 && s.waiters[queue] != nil && len(s.waiters[queue]) == 0 {
			delete(s.waiters, queue)
		}
		s.waitMu.Unlock()
	}
}

// notify is the FSM's Notify hook (called on the apply path: must not block).
func (s *Shard) notify(queue string) {
	s.waitMu.Lock()
	for ch := range s.waiters[queue] {
		kick(ch)
	}
	s.waitMu.Unlock()
}

// wakeAll wakes every Wait (leadership lost, shutdown) so each returns
// the new situation to its caller.
func (s *Shard) wakeAll() {
	s.waitMu.Lock()
	for _, m := range s.waiters {
		for ch := range m {
			kick(ch)
		}
	}
	s.waitMu.Unlock()
}
