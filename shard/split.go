package shard

import (
	"errors"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/raftgroup"
	"google.golang.org/protobuf/proto"
)

// A large enqueue (a SendBatch of many messages) is split into parts of at
// most about maxBytes each so the proposer can keep entries small (see the
// group-commit limits). The parts are consecutive commands in consecutive
// entries of one round, so normally every replica applies them back to
// back, exactly as the whole command: dedup within the batch and ids come
// out the same, and the caller's result is the parts' results joined.
//
// Raft answers each entry on its own, though: during a leadership transfer
// or a lost-and-regained leadership some parts may be refused or left
// unknown while later ones commit. Each item then carries its own outcome
// (joinParts), and the caller retries the failed ones with their dedup
// keys, after the rest. That reorders a batch, so batches holding any
// message group are never split: a group's order is a guarantee.

// splitEnqueue returns the parts of an Enqueue command, or nil when it is
// not an enqueue, is one message, holds a grouped message, or is refused
// as a whole by the FSM (over MaxEnqueueBatch: the FSM must see it whole
// to refuse it).
func splitEnqueue(cmd *fsmpb.Command, maxBytes int) []*fsmpb.Command {
	enq := cmd.GetEnqueue()
	msgs := enq.GetMessages()
	if enq == nil || len(msgs) < 2 || len(msgs) > fsm.MaxEnqueueBatch {
		return nil
	}
	for _, m := range msgs {
		if m.GetGroupId() != "" {
			return nil
		}
	}
	var parts []*fsmpb.Command
	start, size := 0, 0
	flush := func(end int) {
		parts = append(parts, &fsmpb.Command{Cmd: &fsmpb.Command_Enqueue{Enqueue: &fsmpb.Enqueue{
			Queue: enq.GetQueue(), Messages: msgs[start:end:end],
		}}})
		start, size = end, 0
	}
	for i, m := range msgs {
		n := proto.Size(m)
		if i > start && size+n > maxBytes {
			flush(i)
		}
		size += n
	}
	flush(len(msgs))
	return parts
}

// splitState collects the parts' outcomes of one split proposal. Only the
// completer goroutine touches it, in log order.
type splitState struct {
	outs []outcome
	left int
}

func newSplitState(n int) *splitState { return &splitState{outs: make([]outcome, n), left: n} }

// resolve answers the caller, or for a split proposal records the part and
// answers once every part is in.
func (pt part) resolve(o outcome) {
	st := pt.p.split
	if st == nil {
		pt.p.done <- o
		return
	}
	o.n = len(pt.cmd.GetEnqueue().GetMessages())
	st.outs[pt.i] = o
	st.left--
	if st.left == 0 {
		pt.p.done <- joinParts(st.outs)
	}
}

// joinParts merges the parts of a split enqueue. All parts failed with the
// same error: that error (a not-leader refusal stays a refusal, so the
// router retries at the leader). A whole-command refusal (queue not found)
// that every part got alike: that result. Otherwise one result with an
// item per message: applied parts' items as the FSM returned them, and
// CODE_UNAVAILABLE for the items of parts that were refused or whose
// outcome is unknown (retried by the client with their dedup keys). Parts
// all refused as not leader with different hints join into one refusal
// (allNotLeader).
func joinParts(outs []outcome) outcome {
	failed := 0
	for _, o := range outs {
		if o.err != nil {
			failed++
		}
	}
	if failed == len(outs) && sameErrors(outs) {
		return outs[0]
	}
	if failed == len(outs) {
		if nl := allNotLeader(outs); nl != nil {
			return outcome{err: nl}
		}
	}
	if failed == 0 && outs[0].res.GetStatus().GetCode() != fsmpb.Code_CODE_OK && sameStatus(outs) {
		return outs[0]
	}
	var items []*fsmpb.EnqueueItemResult
	for _, o := range outs {
		st := o.res.GetStatus()
		switch {
		case o.err != nil && errors.Is(o.err, raftgroup.ErrUnknownResult):
			st = &fsmpb.Status{Code: fsmpb.Code_CODE_UNAVAILABLE, Message: "outcome unknown, may have been applied (part of a split batch): " + o.err.Error()}
		case o.err != nil:
			st = &fsmpb.Status{Code: fsmpb.Code_CODE_UNAVAILABLE, Message: "not committed (part of a split batch): " + o.err.Error()}
		case st.GetCode() == fsmpb.Code_CODE_OK:
			items = append(items, o.res.GetEnqueue().GetItems()...)
			continue
		}
		for range o.n {
			items = append(items, &fsmpb.EnqueueItemResult{Status: st})
		}
	}
	return outcome{res: &fsmpb.Result{Status: &fsmpb.Status{}, Body: &fsmpb.Result_Enqueue{Enqueue: &fsmpb.EnqueueResult{Items: items}}}}
}

// allNotLeader returns one refusal for parts that were all refused as
// not leader (none reached the log) but with different leader hints, as
// when leadership moved while the parts were being refused: the router
// then retries the whole batch at the leader instead of the caller getting
// an UNAVAILABLE per item. The hint is the last part's that names a
// leader, being the freshest; nil if any part failed otherwise.
func allNotLeader(outs []outcome) *raftgroup.NotLeaderError {
	var best *raftgroup.NotLeaderError
	for _, o := range outs {
		var nl *raftgroup.NotLeaderError
		if errors.Is(o.err, raftgroup.ErrUnknownResult) || !errors.As(o.err, &nl) {
			return nil
		}
		if best == nil || nl.LeaderID != "" || nl.LeaderAddr != "" {
			best = nl
		}
	}
	return best
}

func sameStatus(outs []outcome) bool {
	for _, o := range outs[1:] {
		if o.res.GetStatus().GetCode() != outs[0].res.GetStatus().GetCode() {
			return false
		}
	}
	return true
}

func sameErrors(outs []outcome) bool {
	for _, o := range outs[1:] {
		if o.err.Error() != outs[0].err.Error() {
			return false
		}
	}
	return true
}
