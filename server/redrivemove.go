package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/fsmpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Redrive to another queue (docs/jobs.md, "Dead letters"): each dead
// message is sent to the target with a dedup key derived from its id,
// and discarded from the source only once that send has committed. A
// redrive cut short (its caller gone, this node killed, a leader change)
// and run again finds the messages not yet discarded, sends them again,
// and the target's dedup answers the first copy's id for those already
// sent: each message lands once as long as the retry comes while the
// copy's key is held (moveTo).

// redriveKeyPrefix marks the dedup keys of redriven copies.
const redriveKeyPrefix = "redrive:"

// maxDryRunList bounds the messages a dry run names; it counts them all.
const maxDryRunList = 1000

// redriveKey is the dedup key of the copy of message id of queue: readable
// when it fits fsm.MaxDedupKeyLen, else a hash of the same text.
func redriveKey(queue, id string) string {
	k := redriveKeyPrefix + queue + "/" + id
	if len(k) <= fsm.MaxDedupKeyLen {
		return k
	}
	h := sha256.Sum256([]byte(queue + "/" + id))
	return redriveKeyPrefix + hex.EncodeToString(h[:])
}

// redriveKeyHold is the least time a copy's dedup key is held
// (unique_for_ms, fsm/unique.go), whatever the target's dedup window: a
// redrive cut short and run again within it sends no message twice.
const redriveKeyHold = time.Hour

// redriveCopy is the message the target receives: the dead message's
// body, attributes, type, group, priority and retry policy, a fresh
// receive count, and the redrive dedup key in place of its own, held for
// hold.
func redriveCopy(l listedDead, source string, hold time.Duration) *fsmpb.NewMessage {
	m := l.msg
	return &fsmpb.NewMessage{
		Body: m.GetBody(), Attributes: m.GetAttributes(), Type: m.GetType(), GroupId: m.GetGroupId(),
		DedupKey: redriveKey(source, l.info.GetMessageId()), UniqueForMs: hold.Milliseconds(), Priority: m.GetPriority(), DelayMs: -1,
		MaxReceiveCount: m.GetMaxReceiveCount(), BackoffBaseMs: m.GetBackoffBaseMs(), BackoffMaxMs: m.GetBackoffMaxMs(),
	}
}

// redriveSource yields the dead messages a redrive moves, up to n at a
// time; an empty batch ends it.
type redriveSource func(ctx context.Context, n uint32) ([]listedDead, error)

// listedSource pages through the queue's dead messages that filter
// matches.
func (s *Server) listedSource(queue string, filter *raftqv1.DeadFilter) redriveSource {
	var after *deadCursor
	done := false
	return func(ctx context.Context, n uint32) ([]listedDead, error) {
		for !done {
			page, err := s.listDead(ctx, queue, filter, after, n)
			if err != nil {
				return nil, err
			}
			after, done = page.next, page.next == nil
			if len(page.items) > 0 {
				return page.items, nil
			}
		}
		return nil, nil
	}
}

// namedSource reads the named messages, keeping those dead in queue.
func (s *Server) namedSource(queue string, ids []string) redriveSource {
	return func(ctx context.Context, n uint32) ([]listedDead, error) {
		var out []listedDead
		for len(ids) > 0 && len(out) < int(n) {
			id := ids[0]
			ids = ids[1:]
			mid, m, err := s.getMessage(ctx, id)
			if status.Code(err) == codes.NotFound {
				continue
			}
			if err != nil {
				return nil, err
			}
			if m.GetQueue() != queue || m.GetState() != fsmpb.State_STATE_DEAD {
				continue
			}
			out = append(out, listedDead{
				at:   deadCursor{ms: m.GetStateChangedMs(), shard: mid.Shard, id: m.GetId()},
				msg:  m,
				info: &raftqv1.MessageInfo{MessageId: id, Message: messageFromFSM(m)},
			})
		}
		return out, nil
	}
}

// dryRun counts what src would move and names the first maxDryRunList.
func dryRun(ctx context.Context, src redriveSource) (*raftqv1.RedriveResponse, error) {
	resp := &raftqv1.RedriveResponse{}
	for {
		batch, err := src(ctx, maxDeadList)
		if err != nil {
			return nil, err
		}
		if len(batch) == 0 {
			return resp, nil
		}
		for _, l := range batch {
			resp.Matched++
			if len(resp.WouldMove) < maxDryRunList {
				resp.WouldMove = append(resp.WouldMove, l.info)
			}
		}
	}
}

// moveEach runs move on batches of src, rate messages a second, until src
// is empty; it answers how many moved.
func (s *Server) moveEach(ctx context.Context, rate uint32, src redriveSource, move func(context.Context, []listedDead) (uint64, error)) (uint64, error) {
	per := max(1, rate*uint32(redriveTick/time.Millisecond)/1000)
	tick := time.NewTicker(redriveTick)
	defer tick.Stop()
	var done uint64
	for {
		batch, err := src(ctx, per)
		if err != nil {
			return done, err
		}
		if len(batch) == 0 {
			return done, nil
		}
		n, err := move(ctx, batch)
		done += n
		if err != nil {
			return done, err
		}
		select {
		case <-ctx.Done():
			return done, s.toStatus(ctx, fmt.Errorf("stopped after %d messages: %w", done, ctx.Err()))
		case <-tick.C:
		}
	}
}

// moveTo copies batch to target and then discards from source what the
// target holds; a copy refused stops the redrive with its error, after the
// messages copied before it are discarded.
// hold is how long the copies' dedup keys are held: the target's dedup
// window or redriveKeyHold, whichever is longer.
func (s *Server) moveTo(source string, target *raftqv1.QueueInfo) func(context.Context, []listedDead) (uint64, error) {
	hold := max(redriveKeyHold, time.Duration(target.GetPolicy().GetDedupWindowMs())*time.Millisecond)
	return func(ctx context.Context, batch []listedDead) (uint64, error) {
		copies := make([]*fsmpb.NewMessage, len(batch))
		for i, l := range batch {
			copies[i] = redriveCopy(l, source, hold)
		}
		sent, err := s.router.Send(ctx, target.GetName(), copies)
		if err != nil {
			return 0, s.toStatus(ctx, fmt.Errorf("redrive to %q: %w", target.GetName(), err))
		}
		landed := map[uint32][]uint64{}
		var refused error
		for i, a := range sent {
			if refused == nil && a.Err != nil {
				refused = s.toStatus(ctx, fmt.Errorf("redrive %s to %q: %w", batch[i].info.GetMessageId(), target.GetName(), a.Err))
			}
			if refused == nil && a.Err == nil {
				if err := resultStatus(a.Item.GetStatus()); err != nil {
					refused = fmt.Errorf("redrive %s to %q: %w", batch[i].info.GetMessageId(), target.GetName(), err)
				}
			}
			if a.Err == nil && a.Item.GetStatus().GetCode() == fsmpb.Code_CODE_OK {
				landed[batch[i].at.shard] = append(landed[batch[i].at.shard], batch[i].at.id)
			}
		}
		var n uint64
		for shard, ids := range landed {
			res, err := s.router.Apply(ctx, shard, &fsmpb.Command{Cmd: &fsmpb.Command_DiscardDead{DiscardDead: &fsmpb.DiscardDead{Queue: source, MessageIds: ids}}})
			if err != nil {
				return n, s.toStatus(ctx, fmt.Errorf("discard redriven messages on shard %d: %w", shard, err))
			}
			if err := resultStatus(res.GetStatus()); err != nil {
				return n, err
			}
			n += res.GetCount().GetCount()
		}
		return n, refused
	}
}

// moveInPlace returns batch to ready in its own queue.
func (s *Server) moveInPlace(queue string) func(context.Context, []listedDead) (uint64, error) {
	return func(ctx context.Context, batch []listedDead) (uint64, error) {
		ids := map[uint32][]uint64{}
		for _, l := range batch {
			ids[l.at.shard] = append(ids[l.at.shard], l.at.id)
		}
		var n uint64
		for shard, l := range ids {
			res, err := s.router.Apply(ctx, shard, &fsmpb.Command{Cmd: &fsmpb.Command_Redrive{Redrive: &fsmpb.Redrive{Queue: queue, MessageIds: l}}})
			if err != nil {
				return n, s.toStatus(ctx, fmt.Errorf("redrive on shard %d: %w", shard, err))
			}
			if err := resultStatus(res.GetStatus()); err != nil {
				return n, err
			}
			n += res.GetCount().GetCount()
		}
		return n, nil
	}
}
