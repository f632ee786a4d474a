package router

import (
	"context"
	"fmt"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/peer/peerpb"
	"github.com/raftq/raftq/wire"
)

// PriorOwner is a shard that gave a slot away by slot move Move: until the
// move's dedup window ends, a keyed send to the slot asks it for its dedup
// key first (Topology.DedupPeers).
type PriorOwner struct {
	Shard uint32
	Move  uint64
}

// maxProbes bounds the dedup keys one look-up carries (a SendBatch holds
// at most fsm.MaxEnqueueBatch messages).
const maxProbes = fsm.MaxEnqueueBatch

// priorDuplicates asks the prior owners of the slots of msgs[i], i in
// pending, whether they hold the messages' dedup keys (growing the shard
// count moves slots, not keys: docs/resharding.md). A key a prior owner took before its seal makes the send a
// duplicate of that message, as it would have been had the slot not
// moved; those messages are answered in out and left out of the returned
// pending list, as are those whose look-up failed (the send must not go
// ahead without it: a *PriorLookupError). Two sends of one key that both
// miss meet on the new owner's own dedup index.
func (r *Router) priorDuplicates(ctx context.Context, queue string, table wire.SlotTable, msgs []*fsmpb.NewMessage, pending []int, out []Sent) []int {
	type probe struct {
		i    int
		slot uint32
	}
	asks := map[PriorOwner][]probe{}
	var order []PriorOwner
	for _, i := range pending {
		key := msgs[i].GetDedupKey()
		if key == "" {
			continue
		}
		slot, ok := wire.SlotForMessage(queue, msgs[i].GetGroupId(), key, table.Slots)
		if !ok {
			continue
		}
		for _, p := range r.topo.DedupPeers(queue, slot) {
			if _, seen := asks[p]; !seen {
				order = append(order, p)
			}
			asks[p] = append(asks[p], probe{i, slot})
		}
	}
	if len(order) == 0 {
		return pending
	}
	done := map[int]bool{}
	for _, p := range order {
		var probes []probe
		for _, pr := range asks[p] {
			if !done[pr.i] {
				probes = append(probes, pr)
			}
		}
		for start := 0; start < len(probes); start += maxProbes {
			part := probes[start:min(start+maxProbes, len(probes))]
			req := &peerpb.DedupLookup{Queue: queue}
			for _, pr := range part {
				req.Probes = append(req.Probes, &peerpb.DedupProbe{Key: msgs[pr.i].GetDedupKey(), Slot: pr.slot, MoveId: p.Move})
			}
			resp, err := r.Read(ctx, &peerpb.ShardReadRequest{ShardId: p.Shard, Query: &peerpb.ShardReadRequest_DedupLookup{DedupLookup: req}})
			if err == nil && len(resp.GetDedupMessageIds()) != len(part) {
				err = fmt.Errorf("%d answers to %d dedup probes", len(resp.GetDedupMessageIds()), len(part))
			}
			for k, pr := range part {
				switch {
				case err != nil:
					out[pr.i] = Sent{Shard: p.Shard, Err: &PriorLookupError{Shard: p.Shard, Slot: pr.slot, Err: err}}
					done[pr.i] = true
				case resp.GetDedupMessageIds()[k] != 0:
					out[pr.i] = Sent{Shard: p.Shard, Item: &fsmpb.EnqueueItemResult{MessageId: resp.GetDedupMessageIds()[k], Deduplicated: true}}
					done[pr.i] = true
				}
			}
		}
	}
	left := pending[:0:0]
	for _, i := range pending {
		if !done[i] {
			left = append(left, i)
		}
	}
	return left
}

// PriorLookupError: a dedup look-up on a slot's prior owner failed, so the
// message was not sent (it might be a duplicate of one the prior owner
// holds). Nothing was written; the send is safe to repeat.
type PriorLookupError struct {
	Shard, Slot uint32
	Err         error
}

func (e *PriorLookupError) Error() string {
	return fmt.Sprintf("dedup look-up on shard %d, which owned slot %d before it moved: %v", e.Shard, e.Slot, e.Err)
}

func (e *PriorLookupError) Unwrap() error { return e.Err }

// lookupDedup answers a DedupLookup on a shard this node leads. The
// replica must have applied each probe's seal of its slot: before it, keys
// could still be added, and the answer would not stay true.
func lookupDedup(f *fsm.FSM, shard uint32, q *peerpb.DedupLookup) ([]uint64, error) {
	if len(q.GetProbes()) > maxProbes {
		return nil, fmt.Errorf("%d dedup probes in one look-up, limit %d", len(q.GetProbes()), maxProbes)
	}
	ids := make([]uint64, len(q.GetProbes()))
	for k, p := range q.GetProbes() {
		move, _, ok := f.SealedSlot(p.GetSlot())
		if !ok || move != p.GetMoveId() {
			return nil, &NotSealedError{Shard: shard, Slot: p.GetSlot(), Move: p.GetMoveId()}
		}
		if id, ok := f.LookupDedup(q.GetQueue(), p.GetKey()); ok {
			ids[k] = id
		}
	}
	return ids, nil
}

// NotSealedError: the replica asked has not applied the seal a dedup
// look-up depends on (it is behind); the caller retries.
type NotSealedError struct {
	Shard, Slot uint32
	Move        uint64
}

func (e *NotSealedError) Error() string {
	return fmt.Sprintf("shard %d has not applied the seal of slot %d by move %d yet", e.Shard, e.Slot, e.Move)
}
