package router

import (
	"context"
	"fmt"
	"time"

	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/wire"
)

// Sent is the outcome of one message of a Send.
type Sent struct {
	// Shard is the shard that answered for the message last: the one that
	// took it when Err is nil.
	Shard uint32
	// Item is the shard's answer for the message when Err is nil; its
	// status may still refuse the message (a full queue, a bad message).
	Item *fsmpb.EnqueueItemResult
	// Err: the call to the shard failed (the outcome is as the error
	// says), the shard refused the whole command (*ResultError), or the
	// message's slot stayed sealed for the whole wait (*SlotMovingError).
	Err error
}

// SlotMovingError means a shard refused a message because its slot is
// moving to another shard (fsmpb.Code_CODE_SLOT_MOVED), and the slot table
// still named that shard when the wait for the move (Options.LeaderWait)
// ran out. Nothing was written: the send is safe to repeat.
type SlotMovingError struct {
	Queue string
	// Slot is the message's slot; Keyed is false for a message without a
	// slot (no group, no dedup key), which no shard should refuse so.
	Slot  uint32
	Keyed bool
	Shard uint32
}

// SlotMovingText is in the message of every *SlotMovingError, so that
// clients can tell it from other refusals.
const SlotMovingText = "is moving between shards; retry"

func (e *SlotMovingError) Error() string {
	if !e.Keyed {
		return fmt.Sprintf("shard %d refused an unkeyed message of queue %q as moved: it %s", e.Shard, e.Queue, SlotMovingText)
	}
	return fmt.Sprintf("slot %d of queue %q %s", e.Slot, e.Queue, SlotMovingText)
}

// Send enqueues msgs on queue and answers one Sent per message, in order;
// nil messages (refused before sending) are skipped and answer a zero
// Sent. Keyed messages go to the shard owning their slot in the current
// slot table, the others to one balanced shard (ShardForSend), each
// shard's messages in one command. The error is non-nil only when nothing
// was sent: the shard map is not loaded (a *NotReadyError).
//
// A shard that refuses a message with CODE_SLOT_MOVED has sealed its slot
// for a move (docs of fsmpb.Code_CODE_SLOT_MOVED) and wrote nothing; the
// message is sent again once the table names another owner, which meta
// records soon after the seal. Until then Send polls the table, for at
// most Options.LeaderWait from the first refusal (bounded by ctx), like a
// wait for an election, and then answers a *SlotMovingError. Resending is
// safe: a keyed message carries its dedup key or group, and its first
// attempt wrote nothing.
func (r *Router) Send(ctx context.Context, queue string, msgs []*fsmpb.NewMessage) ([]Sent, error) {
	out := make([]Sent, len(msgs))
	table, n, err := r.placement()
	if err != nil {
		return nil, err
	}
	pending := make([]int, 0, len(msgs))
	for i, m := range msgs {
		if m != nil {
			pending = append(pending, i)
		}
	}
	// moved holds the messages refused with CODE_SLOT_MOVED, by the shard
	// that refused them; each waits until the table names another.
	var moved map[int]uint32
	var deadline time.Time
	backoff := 20 * time.Millisecond
	for first := true; len(pending) > 0; first = false {
		if !first {
			if table, n, err = r.placement(); err != nil {
				// The map does not unload; a malformed table is no
				// reason to hold the caller.
				for _, i := range pending {
					out[i] = Sent{Shard: moved[i], Err: err}
				}
				return out, nil
			}
		}
		// Every round, as a message refused by a seal goes to the slot's
		// new owner only now, whose table lists the move's prior owner.
		if pending = r.priorDuplicates(ctx, queue, table, msgs, pending, out); len(pending) == 0 {
			return out, nil
		}
		// to[i] is message i's shard this round, when sending[i].
		to, sending, sends := make([]uint32, len(msgs)), make([]bool, len(msgs)), 0
		var waiting []int
		free, chosen := uint32(0), false
		for _, i := range pending {
			s, keyed, err := r.shardOf(table, n, queue, msgs[i])
			if !keyed {
				// One balanced shard for all unkeyed messages of a round.
				if !chosen {
					free, chosen = r.freeShard(n), true
				}
				s = free
			}
			if err != nil {
				out[i] = Sent{Err: err}
				continue
			}
			if was, ok := moved[i]; ok && was == s {
				waiting = append(waiting, i)
				continue
			}
			to[i], sending[i] = s, true
			sends++
		}
		if sends == 0 {
			if len(waiting) == 0 {
				return out, nil
			}
			if !time.Now().Before(deadline) {
				r.giveUp(out, waiting, moved, table, queue, msgs, nil)
				return out, nil
			}
			if err := sleepCtx(ctx, min(backoff, time.Until(deadline))); err != nil {
				r.giveUp(out, waiting, moved, table, queue, msgs, err)
				return out, nil
			}
			backoff = min(backoff*2, 50*time.Millisecond)
			pending = waiting
			continue
		}
		plan := PlanItems(len(msgs), func(i int) (uint32, bool) { return to[i], sending[i] })
		refused := r.sendParts(ctx, queue, msgs, plan, out)
		if len(refused) > 0 {
			if moved == nil {
				moved = map[int]uint32{}
			}
			if deadline.IsZero() {
				deadline = time.Now().Add(r.opts.LeaderWait)
			}
			for _, i := range refused {
				moved[i] = to[i]
			}
		}
		pending = append(waiting, refused...)
		if len(pending) > 0 && !time.Now().Before(deadline) {
			// Shards keep refusing while the table keeps moving (a slot
			// moved on again): the same bound as a wait on one table.
			r.giveUp(out, pending, moved, table, queue, msgs, nil)
			return out, nil
		}
	}
	return out, nil
}

// sendParts sends each part of plan as one enqueue and fills out for its
// messages. It returns the messages refused with CODE_SLOT_MOVED, whose
// out entries it leaves for the caller.
func (r *Router) sendParts(ctx context.Context, queue string, msgs []*fsmpb.NewMessage, plan []Part, out []Sent) []int {
	answers := Scatter(ctx, plan, func(ctx context.Context, p Part) (*fsmpb.Result, error) {
		part := make([]*fsmpb.NewMessage, len(p.Items))
		for k, i := range p.Items {
			part[k] = msgs[i]
		}
		return r.Apply(ctx, p.Shard, &fsmpb.Command{Cmd: &fsmpb.Command_Enqueue{Enqueue: &fsmpb.Enqueue{Queue: queue, Messages: part}}})
	})
	var refused []int
	for _, a := range answers {
		err := a.Err
		if err == nil && a.Value.GetStatus().GetCode() != fsmpb.Code_CODE_OK {
			err = &ResultError{Status: a.Value.GetStatus()}
		}
		items := a.Value.GetEnqueue().GetItems()
		if err == nil && len(items) != len(a.Items) {
			err = fmt.Errorf("shard %d: enqueue returned %d results for %d messages", a.Shard, len(items), len(a.Items))
		}
		for k, i := range a.Items {
			switch {
			case err != nil:
				out[i] = Sent{Shard: a.Shard, Err: err}
			case items[k].GetStatus().GetCode() == fsmpb.Code_CODE_SLOT_MOVED:
				refused = append(refused, i)
			default:
				out[i] = Sent{Shard: a.Shard, Item: items[k]}
			}
		}
	}
	return refused
}

// giveUp answers the messages still refused as moved: a *SlotMovingError,
// or cause when the caller's context ended the wait.
func (r *Router) giveUp(out []Sent, items []int, moved map[int]uint32, table wire.SlotTable, queue string, msgs []*fsmpb.NewMessage, cause error) {
	for _, i := range items {
		err := cause
		if err == nil {
			slot, keyed := wire.SlotForMessage(queue, msgs[i].GetGroupId(), msgs[i].GetDedupKey(), table.Slots)
			err = &SlotMovingError{Queue: queue, Slot: slot, Keyed: keyed, Shard: moved[i]}
		}
		out[i] = Sent{Shard: moved[i], Err: err}
	}
}

// shardOf is the shard a keyed message goes to, its slot's owner; keyed
// is false for a message any shard may take. A table naming a shard
// beyond the count this node knows is ahead of its shard map: a
// *NotReadyError, as for a map not loaded.
func (r *Router) shardOf(table wire.SlotTable, n uint32, queue string, m *fsmpb.NewMessage) (s uint32, keyed bool, err error) {
	s, keyed = table.ShardForMessage(queue, m.GetGroupId(), m.GetDedupKey())
	if keyed && s >= n {
		return 0, true, &NotReadyError{NodeID: r.topo.NodeID()}
	}
	return s, keyed, nil
}

// placement is the slot table and shard count one round of routing uses.
// It fails with a *NotReadyError while the shard map is not loaded.
func (r *Router) placement() (wire.SlotTable, uint32, error) {
	n, err := r.shards()
	if err != nil {
		return wire.SlotTable{}, 0, err
	}
	t := r.topo.SlotTable()
	switch {
	case t.Slots == 0:
		// A topology that knows the count and no table: a cluster whose
		// slots were never recorded is in its bootstrap layout.
		t = wire.DefaultSlotTable(n)
	case !t.Valid():
		return wire.SlotTable{}, 0, fmt.Errorf("malformed slot table: %d slots, %d owners", t.Slots, len(t.Owners))
	}
	return t, n, nil
}
