package clienttest

import (
	"context"
	"time"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Job results as raftq keeps them (docs/jobs.md, "Job results and
// status"): ack results up to 64 KiB, and WaitMessage.

const maxResult = 64 << 10

// checkResults refuses results that do not pair with the receipts or are
// too large, as the server does.
func checkResults(r *raftqv1.AckRequest) error {
	rs := r.GetResults()
	if len(rs) != 0 && len(rs) != len(r.GetReceipts()) {
		return errorf(codes.InvalidArgument, "%d results for %d receipts: give none or one per receipt", len(rs), len(r.GetReceipts()))
	}
	for i, b := range rs {
		if len(b) > maxResult {
			return errorf(codes.InvalidArgument, "result %d is %d bytes, above the limit of %d (64 KiB)", i, len(b), maxResult)
		}
	}
	return nil
}

// WaitMessage polls the message until it is acked or dead or the wait
// (0 = 20 s, at most 60 s) runs out, and returns it as GetMessage does.
func (ms *messagesSvc) WaitMessage(ctx context.Context, r *raftqv1.WaitMessageRequest) (*raftqv1.MessageInfo, error) {
	wait := r.GetWaitMs()
	if wait < 0 || wait > 60_000 {
		return nil, errorf(codes.InvalidArgument, "wait_ms %d is outside 0..60000", wait)
	}
	if wait == 0 {
		wait = 20_000
	}
	deadline := time.Now().Add(time.Duration(wait) * time.Millisecond)
	for {
		info, done, err := ms.s.snapshotMessage(ctx, r.GetMessageId())
		if q := r.GetQueue(); err == nil && q != "" && q != info.GetMessage().GetQueue() {
			return nil, errorf(codes.InvalidArgument, "message %s belongs to queue %q, not %q", r.GetMessageId(), info.GetMessage().GetQueue(), q)
		}
		if err != nil || done || !time.Now().Before(deadline) {
			return info, err
		}
		select {
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// snapshotMessage is a copy of the message and whether it is finished.
func (s *Server) snapshotMessage(ctx context.Context, id string) (*raftqv1.MessageInfo, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := s.byID(ctx, id)
	if err != nil {
		return nil, false, err
	}
	done := m.State == raftqv1.State_STATE_ACKED || m.State == raftqv1.State_STATE_DEAD
	return &raftqv1.MessageInfo{MessageId: id, Message: proto.Clone(m).(*raftqv1.Message)}, done, nil
}
