package shard

import (
	"fmt"
	"time"
)

// The queue of sends waiting for the proposer is bounded by bytes and by
// age, so an overloaded leader refuses a send at once (RESOURCE_EXHAUSTED
// with a retry hint) instead of holding it until the caller's deadline:
// a caller told "not now" can back off or go elsewhere, one that times
// out cannot tell whether its send was taken. Consumers' commands use the
// other lane and are never refused here (runProposer).
const (
	// maxQueuedSendBytes is 16 times what raft holds in flight
	// (maxInFlightBytes): the backlog a proposer clears in a few rounds.
	maxQueuedSendBytes = 16 * maxInFlightBytes
	// maxSendQueueWait: sends queued while the proposer took none for
	// this long are behind a stuck or starved proposer.
	maxSendQueueWait = 2 * time.Second
	// sendQueueRetry is the wait a refused sender is asked for.
	sendQueueRetry = 200 * time.Millisecond
)

// ErrOverloaded matches (errors.Is) an *OverloadError.
var ErrOverloaded = errOverloaded{}

type errOverloaded struct{}

func (errOverloaded) Error() string { return "shard overloaded" }

// OverloadError refuses a send because the leader's queue of sends is
// full: nothing was proposed. RetryAfter is how long the sender should
// wait.
type OverloadError struct {
	Shard      uint32
	Reason     string
	RetryAfter time.Duration
}

func (e *OverloadError) Error() string {
	return fmt.Sprintf("shard %d is overloaded: %s; retry in %v", e.Shard, e.Reason, e.RetryAfter)
}

// Is makes errors.Is(err, ErrOverloaded) hold.
func (e *OverloadError) Is(target error) bool { return target == ErrOverloaded }

// admitQueuedSend reserves size bytes of the send queue, or refuses.
// Every reservation is released by tookSend once the proposer takes (or
// drops) the proposal.
func (s *Shard) admitQueuedSend(size int, now time.Time) error {
	queued := s.sendBytes.Load()
	if queued > 0 && now.Sub(time.Unix(0, s.sendTaken.Load())) > maxSendQueueWait {
		return &OverloadError{Shard: s.cfg.ID, Reason: fmt.Sprintf("no queued send was proposed for %v", maxSendQueueWait), RetryAfter: sendQueueRetry}
	}
	if queued+int64(size) > s.maxQueuedSend() && queued > 0 {
		return &OverloadError{Shard: s.cfg.ID, Reason: fmt.Sprintf("%d bytes of sends already wait to be proposed", queued), RetryAfter: sendQueueRetry}
	}
	if s.sendBytes.Add(int64(size)) == int64(size) {
		// The queue was empty: its age counts from now.
		s.sendTaken.Store(now.UnixNano())
	}
	return nil
}

func (s *Shard) maxQueuedSend() int64 {
	if s.cfg.maxQueuedSend > 0 {
		return s.cfg.maxQueuedSend
	}
	return maxQueuedSendBytes
}

// tookSend releases p's reservation as the proposer takes p off the send
// lane.
func (s *Shard) tookSend(p *proposal) {
	if p == nil {
		return
	}
	s.sendBytes.Add(-int64(p.size))
	s.sendTaken.Store(time.Now().UnixNano())
}
