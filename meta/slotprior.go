package meta

import (
	"time"

	"github.com/raftq/raftq/meta/metapb"
)

// PriorOwner is a shard that gave a slot away by slot move Move, whose
// seal it applied; a keyed send to the slot asks it for its dedup key
// (DedupPeers, router.PriorDuplicate).
type PriorOwner struct {
	Shard    uint32
	Move     uint64
	RoutedMs int64 // SlotMove.RoutedMs
}

// PriorSlack is how long past dedup_until nodes keep asking prior owners:
// the bound was set by the meta leader's clock and is read by every node's,
// and a node whose clock runs ahead must not stop asking early. Callers
// pass DedupPeers their clock minus it.
const PriorSlack = time.Minute

// Forgettable reports whether a finished move's record can be dropped: no
// node still asks its prior owner, whatever its clock (twice the slack).
func (mv SlotMove) Forgettable(nowMs int64) bool {
	return mv.Phase == metapb.SlotMovePhase_SLOT_MOVE_PHASE_DONE && mv.DedupUntilMs+2*PriorSlack.Milliseconds() < nowMs
}
