package server

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/fsm/fsmpb"
)

// WaitMessage limits: a call waits DefaultWaitMs unless it asks for up to
// MaxWaitMs. Callers wait longer by calling again (client.Wait does).
const (
	DefaultWaitMs = 20_000
	MaxWaitMs     = 60_000
)

// Poll intervals of a wait: short at first so a quick job answers
// quickly, growing so a long job costs one shard read per
// maxWaitPoll.
const (
	minWaitPoll = 20 * time.Millisecond
	maxWaitPoll = 250 * time.Millisecond
)

// finished reports whether a message has reached a state it leaves only
// by an operator's hand (redrive): acked or dead.
func finished(m *fsmpb.Message) bool {
	st := m.GetState()
	return st == fsmpb.State_STATE_ACKED || st == fsmpb.State_STATE_DEAD
}

// WaitMessage long-polls a message until it is finished or the wait ends.
// It reads the shard leader's record over and over rather than waking on
// the state change: the record may live on another node, and a leader
// change in the middle only costs reads that fail with Unavailable, which
// the loop rides out, so the wait holds across failover without a wake-up
// registry on every leader.
func (m *messages) WaitMessage(ctx context.Context, req *raftqv1.WaitMessageRequest) (*raftqv1.MessageInfo, error) {
	wait := req.GetWaitMs()
	if wait < 0 || wait > MaxWaitMs {
		return nil, invalid("wait_ms %d is outside 0..%d (0 = %d)", wait, MaxWaitMs, DefaultWaitMs)
	}
	if wait == 0 {
		wait = DefaultWaitMs
	}
	deadline := time.Now().Add(time.Duration(wait) * time.Millisecond)
	_, msg, err := m.getMessage(ctx, req.GetMessageId())
	if err != nil {
		return nil, err
	}
	if err := allowed(ctx, "/raftq.v1.Messages/WaitMessage", permRead, msg.GetQueue()); err != nil {
		return nil, err
	}
	if q := req.GetQueue(); q != "" && q != msg.GetQueue() {
		return nil, invalid("message %s belongs to queue %q, not %q", req.GetMessageId(), msg.GetQueue(), q)
	}
	poll := minWaitPoll
	for !finished(msg) {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		t := time.NewTimer(min(poll, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, status.FromContextError(ctx.Err()).Err()
		case <-t.C:
		}
		poll = min(2*poll, maxWaitPoll)
		_, next, err := m.getMessage(ctx, req.GetMessageId())
		if status.Code(err) == codes.Unavailable && time.Now().Before(deadline) {
			continue // a leader change: the next read finds the new leader
		}
		if err != nil {
			return nil, err
		}
		msg = next
	}
	out := messageFromFSM(msg)
	if m.receipts.Load() != nil {
		hideLiveLease(out)
	}
	return &raftqv1.MessageInfo{MessageId: req.GetMessageId(), Message: out}, nil
}
