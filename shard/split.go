package shard

import (
	"fmt"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/fsmpb"
	"google.golang.org/protobuf/proto"
)

// A large enqueue (a SendBatch of many messages) is split into parts of at
// most about maxBytes each so the proposer can keep entries small (see the
// group-commit limits). The parts are consecutive commands in consecutive
// entries of one round, so every replica applies them back to back in the
// same order as the whole command: group order, dedup within the batch and
// ids come out the same. Only the completion differs: the caller's result
// is the parts' results joined.

// splitEnqueue returns the parts of an Enqueue command, or nil when it is
// not an enqueue, is one message, or is refused as a whole by the FSM (over
// MaxEnqueueBatch: the FSM must see it whole to refuse it).
func splitEnqueue(cmd *fsmpb.Command, maxBytes int) []*fsmpb.Command {
	enq := cmd.GetEnqueue()
	msgs := enq.GetMessages()
	if enq == nil || len(msgs) < 2 || len(msgs) > fsm.MaxEnqueueBatch {
		return nil
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
	st.outs[pt.i] = o
	st.left--
	if st.left == 0 {
		pt.p.done <- joinParts(st.outs)
	}
}

// joinParts merges the parts of a split enqueue. All parts applied: their
// items in order. All parts failed with the same error: that error (a
// not-leader refusal stays a refusal). Anything mixed: some parts may have
// applied and others not, so the outcome is unknown — the caller retries
// with dedup keys, which makes the applied messages come back deduplicated.
func joinParts(outs []outcome) outcome {
	failed := 0
	for _, o := range outs {
		if o.err != nil {
			failed++
		}
	}
	switch {
	case failed == len(outs) && sameErrors(outs):
		return outs[0]
	case failed > 0:
		for _, o := range outs {
			if o.err != nil {
				// %v, not %w: a part's not-leader refusal must not make the
				// whole look refused (callers would retry without dedup).
				return outcome{err: fmt.Errorf("%w: part of a split enqueue failed: %v", ErrUnknownResult, o.err)}
			}
		}
	}
	first := outs[0].res
	if first.GetStatus().GetCode() != fsmpb.Code_CODE_OK {
		// A whole-command refusal (e.g. queue not found) applies to every
		// part alike, since the parts are consecutive in the log.
		for _, o := range outs[1:] {
			if o.res.GetStatus().GetCode() != first.GetStatus().GetCode() {
				return outcome{err: fmt.Errorf("%w: parts of a split enqueue disagree (%v, %v)", ErrUnknownResult,
					first.GetStatus().GetCode(), o.res.GetStatus().GetCode())}
			}
		}
		return outs[0]
	}
	var items []*fsmpb.EnqueueItemResult
	for _, o := range outs {
		if o.res.GetStatus().GetCode() != fsmpb.Code_CODE_OK {
			return outcome{err: fmt.Errorf("%w: parts of a split enqueue disagree (%v, %v)", ErrUnknownResult,
				fsmpb.Code_CODE_OK, o.res.GetStatus().GetCode())}
		}
		items = append(items, o.res.GetEnqueue().GetItems()...)
	}
	return outcome{res: &fsmpb.Result{Status: first.GetStatus(), Body: &fsmpb.Result_Enqueue{Enqueue: &fsmpb.EnqueueResult{Items: items}}}}
}

func sameErrors(outs []outcome) bool {
	for _, o := range outs[1:] {
		if o.err.Error() != outs[0].err.Error() {
			return false
		}
	}
	return true
}
