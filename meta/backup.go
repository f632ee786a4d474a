package meta

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/raftq/raftq/meta/metapb"
	"github.com/raftq/raftq/raftgroup"
)

// BackupPiece is the meta piece of a backup: the state the leader holds
// once every entry committed before the call has been applied (a barrier
// through the log, which also proves leadership with a quorum), encoded as
// a meta snapshot. index is the applied index that state belongs to; term
// is the leader's term. Only the leader answers: others return a
// *raftgroup.NotLeaderError.
func (s *Store) BackupPiece(ctx context.Context) (data []byte, index, term uint64, err error) {
	if !s.IsLeader() {
		return nil, 0, 0, s.notLeader()
	}
	if err := raftgroup.WaitFuture(ctx, s.raft.Barrier(timeoutOf(ctx)), s.stopped); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return nil, 0, 0, fmt.Errorf("meta backup: %w: %w", s.notLeader(), err)
		}
		return nil, 0, 0, fmt.Errorf("meta backup: barrier: %w", err)
	}
	snap := s.fsm.snapshotProto()
	b, err := encodeSnapshot(snap)
	if err != nil {
		return nil, 0, 0, err
	}
	return b, snap.GetAppliedIndex(), s.raft.CurrentTerm(), nil
}

func timeoutOf(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return max(time.Until(dl), time.Millisecond)
	}
	return 0
}

// RestoreBackup makes a new cluster's meta state the backup's: its queues
// (with their policies and times) and a shard map of the backup's shard
// count placed afresh over this cluster's voters, as PlaceShards would
// (the backup's map names the old cluster's nodes). Node formats, moves,
// drains and retired ids of the old cluster are left out: they describe
// nodes this cluster does not have. It goes through raft as a user
// snapshot (raft.Restore), so the queues and the map arrive in one step
// and every replica installs them. Only the leader of a cluster whose map
// is not placed yet may call it: ErrAlreadyPlaced once a map exists, so a
// second call (another leader after a failover) changes nothing.
func (s *Store) RestoreBackup(ctx context.Context, old *metapb.Snapshot, replication int) (ShardMap, error) {
	if !s.IsLeader() {
		return ShardMap{}, s.notLeader()
	}
	if s.ShardMap().Placed() {
		return ShardMap{}, refused(ErrAlreadyPlaced, "shard map already placed")
	}
	count := old.GetShardMap().GetCount()
	if count == 0 {
		return ShardMap{}, errors.New("restore: the backup's meta piece has no shard map")
	}
	voters, addrs, err := s.placementVoters()
	if err != nil {
		return ShardMap{}, fmt.Errorf("restore: %w", err)
	}
	// The map is built by the FSM's own placement code on a scratch FSM,
	// so it is exactly what PlaceShards would have recorded.
	scratch := NewFSM(nil)
	if res := scratch.placeShards(placeCommand(count, Place(count, replication, voters), addrs, newClusterID())); res.GetCode() != metapb.Code_CODE_OK {
		return ShardMap{}, fmt.Errorf("restore: place shards: %s", res.GetMessage())
	}
	carrySlots(scratch.shardMap, old.GetShardMap())
	snap := &metapb.Snapshot{
		Version:      SnapshotVersion,
		AppliedIndex: old.GetAppliedIndex(),
		Queues:       old.GetQueues(),
		ShardMap:     scratch.shardMap,
		// The API keys come along, so clients of the old cluster keep
		// working; the audit trail is the old cluster's history and stays
		// in the backup.
		ApiKeys: old.GetApiKeys(),
	}
	b, err := encodeSnapshot(snap)
	if err != nil {
		return ShardMap{}, fmt.Errorf("restore: %w", err)
	}
	// raft places the restored snapshot above both its last index and
	// this one, so the FSM's applied index (the backup's) stays below
	// every entry that follows.
	// raft refuses a user snapshot until the leader applied its
	// configuration entry; a new leader may not have yet.
	if err := raftgroup.WaitFuture(ctx, s.raft.Barrier(timeoutOf(ctx)), s.stopped); err != nil {
		return ShardMap{}, fmt.Errorf("restore: barrier: %w", err)
	}
	sm := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Index: old.GetAppliedIndex(), Size: int64(len(b))}
	if err := s.raft.Restore(sm, bytes.NewReader(b), timeoutOf(ctx)); err != nil {
		return ShardMap{}, fmt.Errorf("restore: meta: %w", err)
	}
	return s.ShardMap(), nil
}

// carrySlots gives a restored map the backup's slot table and slot moves:
// the shard pieces hold each key's messages, dedup keys, seals and holds
// where that table put them, so routing must not change. The shard pieces
// were taken before the meta piece and may predate a move's last steps,
// so a finished move is put back in ROUTE: its driver seals again
// (idempotent), releases whatever groups an older shard piece still
// holds, and finishes it again.
func carrySlots(to, from *metapb.ShardMap) {
	to.Slots = from.GetSlots()
	to.SlotOwners = slices.Clone(from.GetSlotOwners())
	to.NextSlotMoveId = from.GetNextSlotMoveId()
	for _, mv := range from.GetSlotMoves() {
		c := proto.Clone(mv).(*metapb.SlotMove)
		if c.GetPhase() == metapb.SlotMovePhase_SLOT_MOVE_PHASE_DONE {
			c.Phase = metapb.SlotMovePhase_SLOT_MOVE_PHASE_ROUTE
		}
		to.SlotMoves = append(to.SlotMoves, c)
	}
}
