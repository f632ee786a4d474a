package server

import (
	"context"

	"github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/fsmpb"
)

// Snooze hands a leased message back without using up an attempt: ready
// again after delay_ms, its receive count lowered by the receive this lease
// took (fsm/cmd_snooze.go). Shards whose replicas do not all run log
// format 7 refuse it with FailedPrecondition (fsm/format.go).
func (m *messages) Snooze(ctx context.Context, req *raftqv1.SnoozeRequest) (*raftqv1.SnoozeResponse, error) {
	if err := m.ready(ctx); err != nil {
		return nil, err
	}
	r, err := m.shardOf(req.GetReceipt())
	if err != nil {
		return nil, err
	}
	if err := msWithin("delay_ms", req.GetDelayMs(), fsm.MaxDelayMs); err != nil {
		return nil, err
	}
	if len(req.GetReason()) > fsm.MaxErrorLen {
		return nil, invalid("reason of %d bytes above the limit %d", len(req.GetReason()), fsm.MaxErrorLen)
	}
	cmd := &fsmpb.Command{Cmd: &fsmpb.Command_Snooze{Snooze: &fsmpb.Snooze{Items: []*fsmpb.SnoozeItem{{
		Receipt: fsmReceipt(r), DelayMs: req.GetDelayMs(), Reason: req.GetReason(),
	}}}}}
	if _, err := m.settle(ctx, r, cmd); err != nil {
		return nil, err
	}
	return &raftqv1.SnoozeResponse{}, nil
}
