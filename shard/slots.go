package shard

import (
	"context"
	"fmt"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/fsmpb"
)

// The slot move commands of growing the shard count (docs/resharding.md):
// the meta leader's move driver seals slots on the shard they leave and
// holds their FIFO groups on the shard they go to. Each proposes through
// Propose (leader only, same errors) and needs log format 4 on every
// replica (*fsm.FormatLagError until then). All are idempotent, so a
// driver that lost an answer proposes again.

// groupsPerProposal bounds the groups of one HoldGroups or ReleaseGroups
// entry (about 64 KB of names at most); longer lists go as several.
const groupsPerProposal = 256

// CommandError is a command the shard applied and refused as a whole:
// nothing changed. Status.Code says why (fsmpb.Code_CODE_INVALID_ARGUMENT,
// fsmpb.Code_CODE_FAILED_PRECONDITION, ...).
type CommandError struct {
	Shard  uint32
	Kind   string // the command's oneof name, e.g. "seal_slots"
	Status *fsmpb.Status
}

func (e *CommandError) Error() string {
	return fmt.Sprintf("shard %d: %s refused: %s: %s", e.Shard, e.Kind, e.Status.GetCode(), e.Status.GetMessage())
}

// proposeOK proposes cmd and turns a refused result into a *CommandError.
func (s *Shard) proposeOK(ctx context.Context, cmd *fsmpb.Command) (*fsmpb.Result, error) {
	res, err := s.Propose(ctx, cmd)
	if err != nil {
		return nil, fmt.Errorf("shard %d: %s: %w", s.cfg.ID, fsm.KindName(cmd), err)
	}
	if res.GetStatus().GetCode() != fsmpb.Code_CODE_OK {
		return nil, &CommandError{Shard: s.cfg.ID, Kind: fsm.KindName(cmd), Status: res.GetStatus()}
	}
	return res, nil
}

// SealSlots seals slots (of slotCount) on this shard for move moveID,
// which takes them to shard to: from when it applies, every new keyed
// message of those slots is refused with CODE_SLOT_MOVED. It returns the
// FIFO groups of the slots that still have live messages here, the groups
// the receiving shard must hold (HoldGroups).
func (s *Shard) SealSlots(ctx context.Context, moveID uint64, slots []uint32, slotCount, to uint32) ([]*fsmpb.QueueGroup, error) {
	c := &fsmpb.SealSlots{MoveId: moveID, Slots: slots, SlotCount: slotCount, ToShard: to}
	if err := fsm.ValidateSealSlots(c); err != nil {
		return nil, fmt.Errorf("shard %d: seal slots: %w", s.cfg.ID, err)
	}
	res, err := s.proposeOK(ctx, &fsmpb.Command{Cmd: &fsmpb.Command_SealSlots{SealSlots: c}})
	if err != nil {
		return nil, err
	}
	return res.GetSeal().GetLiveGroups(), nil
}

// UnsealSlots drops every seal of move moveID (an aborted move) and
// returns how many slots it unsealed.
func (s *Shard) UnsealSlots(ctx context.Context, moveID uint64) (uint64, error) {
	if moveID == 0 {
		return 0, fmt.Errorf("shard %d: unseal slots: %w: move id 0", s.cfg.ID, fsm.ErrInvalidArgument)
	}
	res, err := s.proposeOK(ctx, &fsmpb.Command{Cmd: &fsmpb.Command_UnsealSlots{UnsealSlots: &fsmpb.UnsealSlots{MoveId: moveID}}})
	if err != nil {
		return 0, err
	}
	return res.GetCount().GetCount(), nil
}

// HoldGroups holds FIFO groups on this shard for move moveID, which brings
// them from shard from: none of their messages is leased until released.
// Long lists are proposed in several entries, in order; on an error the
// first ones may be held already, and proposing again is harmless.
func (s *Shard) HoldGroups(ctx context.Context, moveID uint64, from uint32, items []*fsmpb.QueueGroup) error {
	for len(items) > 0 {
		n := min(len(items), groupsPerProposal)
		c := &fsmpb.HoldGroups{MoveId: moveID, FromShard: from, Items: items[:n]}
		if err := fsm.ValidateHoldGroups(c); err != nil {
			return fmt.Errorf("shard %d: hold groups: %w", s.cfg.ID, err)
		}
		if _, err := s.proposeOK(ctx, &fsmpb.Command{Cmd: &fsmpb.Command_HoldGroups{HoldGroups: c}}); err != nil {
			return err
		}
		items = items[n:]
	}
	return nil
}

// ReleaseGroups releases holds of move moveID: items, or every hold of
// the move when all is set (items must then be empty). A group no move
// holds any more becomes leasable.
func (s *Shard) ReleaseGroups(ctx context.Context, moveID uint64, items []*fsmpb.QueueGroup, all bool) error {
	for first := true; first || len(items) > 0; first = false {
		n := min(len(items), groupsPerProposal)
		c := &fsmpb.ReleaseGroups{MoveId: moveID, Items: items[:n], All: all}
		if err := fsm.ValidateReleaseGroups(c); err != nil {
			return fmt.Errorf("shard %d: release groups: %w", s.cfg.ID, err)
		}
		if _, err := s.proposeOK(ctx, &fsmpb.Command{Cmd: &fsmpb.Command_ReleaseGroups{ReleaseGroups: c}}); err != nil {
			return err
		}
		items = items[n:]
	}
	return nil
}

// LookupDedup is fsm.FSM.LookupDedup on this replica's state: the message
// a live dedup key of queue names. On a follower the state may trail the
// leader's; a caller that needs the seal applied waits for it first
// (SealedSlot).
func (s *Shard) LookupDedup(queue, key string) (id uint64, ok bool) {
	return s.fsm.LookupDedup(queue, key)
}

// LiveGroups is fsm.FSM.LiveGroups on this replica's state: those of items
// that still have live messages here.
func (s *Shard) LiveGroups(items []*fsmpb.QueueGroup) []*fsmpb.QueueGroup {
	return s.fsm.LiveGroups(items)
}

// SealedSlot is fsm.FSM.SealedSlot on this replica's state.
func (s *Shard) SealedSlot(slot uint32) (moveID uint64, to uint32, ok bool) {
	return s.fsm.SealedSlot(slot)
}
