package fsm

import (
	"fmt"

	"github.com/raftq/raftq/fsm/fsmpb"
)

// applyCtx is what one command may read besides the state: the raft term of
// its entry and the entry's jitter seed with the command's index.
type applyCtx struct {
	term   uint64
	seed   uint64
	cmdIdx int
	due    uint64 // messages changed by processDue at the start of the entry
}

// applyEntry applies one decoded entry: clock, due work, then each command.
func (s *state) applyEntry(e *fsmpb.Entry, term uint64) *Response {
	if now := min(e.GetNowMs(), maxClockMs); now > s.clock {
		s.clock = now
	}
	ctx := applyCtx{term: term, seed: e.GetSeed(), due: s.processDue()}
	resp := &Response{Results: make([]*fsmpb.Result, len(e.GetCommands()))}
	for i, c := range e.GetCommands() {
		ctx.cmdIdx = i
		resp.Results[i] = s.applyCommand(&ctx, c)
	}
	return resp
}

func (s *state) applyCommand(ctx *applyCtx, c *fsmpb.Command) *fsmpb.Result {
	cmd := c
	switch c := c.GetCmd().(type) {
	case *fsmpb.Command_UpsertQueue:
		return s.upsertQueue(c.UpsertQueue)
	case *fsmpb.Command_DeleteQueue:
		return s.deleteQueue(c.DeleteQueue)
	case *fsmpb.Command_PurgeQueue:
		return s.purgeQueue(c.PurgeQueue)
	case *fsmpb.Command_Enqueue:
		return s.enqueue(c.Enqueue)
	case *fsmpb.Command_Receive:
		return s.receive(ctx, c.Receive)
	case *fsmpb.Command_Ack:
		return s.ack(c.Ack)
	case *fsmpb.Command_Nack:
		return s.nack(ctx, c.Nack)
	case *fsmpb.Command_Extend:
		return s.extend(c.Extend)
	case *fsmpb.Command_Snooze:
		return s.snooze(c.Snooze)
	case *fsmpb.Command_DeadLetter:
		return s.deadLetter(c.DeadLetter)
	case *fsmpb.Command_Redrive:
		return s.redrive(c.Redrive)
	case *fsmpb.Command_DiscardDead:
		return s.discardDead(c.DiscardDead)
	case *fsmpb.Command_Tick:
		return countResult(ctx.due)
	case *fsmpb.Command_LeaderGrace:
		return s.leaderGrace(ctx, c.LeaderGrace)
	case *fsmpb.Command_Cancel:
		return s.cancel(c.Cancel)
	case *fsmpb.Command_SealSlots:
		return s.sealSlots(c.SealSlots)
	case *fsmpb.Command_UnsealSlots:
		return s.unsealSlots(c.UnsealSlots)
	case *fsmpb.Command_HoldGroups:
		return s.holdGroups(c.HoldGroups)
	case *fsmpb.Command_ReleaseGroups:
		return s.releaseGroups(c.ReleaseGroups)
	default:
		if nums, _ := UnknownKinds(cmd); len(nums) > 0 {
			// An ignorable kind of a newer binary (checkKinds stopped on
			// any other): skipped alike by every replica that lacks it.
			// Only the proposer's result reaches a caller, and a proposer
			// knows the kinds it proposes.
			return &fsmpb.Result{Status: okStatus()}
		}
		// An empty command: refused the same way on every replica.
		return failed(fsmpb.Code_CODE_INVALID_ARGUMENT, "empty command")
	}
}

func status(code fsmpb.Code, format string, args ...any) *fsmpb.Status {
	return &fsmpb.Status{Code: code, Message: fmt.Sprintf(format, args...)}
}

func okStatus() *fsmpb.Status { return &fsmpb.Status{} }

func failed(code fsmpb.Code, format string, args ...any) *fsmpb.Result {
	return &fsmpb.Result{Status: status(code, format, args...)}
}

func invalid(err error) *fsmpb.Status {
	return &fsmpb.Status{Code: fsmpb.Code_CODE_INVALID_ARGUMENT, Message: err.Error()}
}

func countResult(n uint64) *fsmpb.Result {
	return &fsmpb.Result{Status: okStatus(), Body: &fsmpb.Result_Count{Count: &fsmpb.CountResult{Count: n}}}
}

func itemsResult(items []*fsmpb.ItemResult) *fsmpb.Result {
	return &fsmpb.Result{Status: okStatus(), Body: &fsmpb.Result_Items{Items: &fsmpb.ItemsResult{Items: items}}}
}

func (s *state) queueOf(name string) (*queue, *fsmpb.Result) {
	q, ok := s.queues[name]
	if !ok {
		return nil, failed(fsmpb.Code_CODE_QUEUE_NOT_FOUND, "queue %q not found", name)
	}
	return q, nil
}

// truncate cuts s to at most n bytes on a rune boundary, so the result stays
// valid UTF-8 (proto3 strings must be).
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
