package shard

import (
	"context"
	"time"

	"github.com/raftq/raftq/fsm/fsmpb"
)

// Receive proposes r and, when it finds no message and wait > 0, waits for
// the FSM to report new ready messages in the queue, the wait to elapse or
// ctx to end, then proposes again. Interest is registered before the first
// proposal, so an enqueue applied in between is not missed. An empty result
// after the wait is a normal outcome. Only on the leader.
func (s *Shard) Receive(ctx context.Context, r *fsmpb.Receive, wait time.Duration) (*fsmpb.Result, error) {
	cmd := &fsmpb.Command{Cmd: &fsmpb.Command_Receive{Receive: r}}
	if wait <= 0 {
		return s.Propose(ctx, cmd)
	}
	wake, unwatch := s.watch(r.GetQueue())
	defer unwatch()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		res, err := s.Propose(ctx, cmd)
		if err != nil {
			return nil, err
		}
		if res.GetStatus().GetCode() != fsmpb.Code_CODE_OK || len(res.GetReceive().GetMessages()) > 0 {
			return res, nil
		}
		select {
		case <-wake:
		case <-deadline.C:
			return res, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.closing:
			return res, nil
		}
	}
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

// wakeAll wakes every long poll (leadership lost, shutdown) so each
// re-proposes and returns the new situation to its caller.
func (s *Shard) wakeAll() {
	s.waitMu.Lock()
	for _, m := range s.waiters {
		for ch := range m {
			kick(ch)
		}
	}
	s.waitMu.Unlock()
}
