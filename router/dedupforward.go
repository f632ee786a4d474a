package router

import (
	"context"
	"fmt"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/peer/peerpb"
	"github.com/raftq/raftq/wire"
)

// PriorOwner is a shard that owned a slot before a slot move whose dedup
// look-ups have not ended (meta.ShardMap.PriorOwners).
type PriorOwner struct {
	Shard uint32
	Move  uint64
}

// PriorDuplicate looks a keyed send's dedup key up on the shards that
// owned its slot before it moved (growing the shard count): a key one of
// them took before its seal makes the send a duplicate of that message,
// as it would have been had the slot not moved. Keys are not copied on a
// move (there can be millions); they are asked for while they can live.
// found is false when no prior owner holds the key; an error means one
// could not answer, and the send must not go ahead.
func (r *Router) PriorDuplicate(ctx context.Context, queue, key string, slot uint32, prior []PriorOwner) (id wire.MessageID, found bool, err error) {
	for _, p := range prior {
		resp, err := r.Read(ctx, &peerpb.ShardReadRequest{ShardId: p.Shard, Query: &peerpb.ShardReadRequest_DedupLookup{
			DedupLookup: &peerpb.DedupLookup{Queue: queue, Key: key, Slot: slot, MoveId: p.Move}}})
		if err != nil {
			return wire.MessageID{}, false, fmt.Errorf("dedup look-up on shard %d, which owned slot %d: %w", p.Shard, slot, err)
		}
		if m := resp.GetDedupMessageId(); m != 0 {
			return wire.MessageID{Shard: p.Shard, ID: m}, true, nil
		}
	}
	return wire.MessageID{}, false, nil
}

// lookupDedup answers a DedupLookup on a shard this node leads. The
// replica must have applied the move's seal of the slot: before it, keys
// could still be added, and the answer would not stay true.
func lookupDedup(f *fsm.FSM, shard uint32, q *peerpb.DedupLookup) (uint64, error) {
	move, _, ok := f.SealedSlot(q.GetSlot())
	if !ok || move != q.GetMoveId() {
		return 0, &NotSealedError{Shard: shard, Slot: q.GetSlot(), Move: q.GetMoveId()}
	}
	id, ok := f.LookupDedup(q.GetQueue(), q.GetKey())
	if !ok {
		return 0, nil
	}
	return id, nil
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
