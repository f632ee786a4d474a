package meta

import (
	"slices"

	"github.com/raftq/raftq/meta/metapb"
)

// PriorOwner is a shard that gave a slot away in a slot move whose dedup
// look-ups last until DedupUntilMs.
type PriorOwner struct {
	Shard        uint32
	Move         uint64
	DedupUntilMs int64
}

// priorSlackMs keeps asking prior owners a minute past dedup_until: the
// bound was set by the meta leader's clock and is read by every node's,
// and a node whose clock runs ahead must not stop asking early.
const priorSlackMs = 60_000

// PriorOwners lists the shards that owned slot before moves that routed it
// away less than a dedup window ago (at nowMs, the caller's wall clock):
// a keyed send to the slot's owner asks them for its dedup key first
// (router.PriorDuplicate). Newest move first.
func (m ShardMap) PriorOwners(slot uint32, nowMs int64) []PriorOwner {
	var out []PriorOwner
	for i := len(m.SlotMoves) - 1; i >= 0; i-- {
		mv := m.SlotMoves[i]
		if mv.Phase == metapb.SlotMovePhase_SLOT_MOVE_PHASE_SEAL || mv.DedupUntilMs+priorSlackMs < nowMs {
			continue
		}
		if _, ok := slices.BinarySearch(mv.Slots, slot); ok {
			out = append(out, PriorOwner{Shard: mv.From, Move: mv.ID, DedupUntilMs: mv.DedupUntilMs})
		}
	}
	return out
}

// Forgettable reports whether a finished move's record can be dropped: no
// node still asks its prior owner, whatever its clock (twice the slack).
func (mv SlotMove) Forgettable(nowMs int64) bool {
	return mv.Phase == metapb.SlotMovePhase_SLOT_MOVE_PHASE_DONE && mv.DedupUntilMs+2*priorSlackMs < nowMs
}
