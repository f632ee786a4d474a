package meta

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/raftq/raftq/meta/metapb"
	"github.com/raftq/raftq/raftgroup"
)

// A meta piece restores into a new group: its queues, a map of its shard
// count placed over the new voters, once; later commands apply although
// the backup's applied index is above the new log's.
func TestStore_BackupPieceRestoresIntoANewGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	old := mustOpenSingle(t, t.TempDir(), true)
	waitLeader(t, old)
	for i := range 40 {
		if _, err := old.CreateQueue(ctx, fmt.Sprintf("q%02d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := old.PlaceShards(ctx, 2, 3); err != nil {
		t.Fatal(err)
	}
	b, index, term, err := old.BackupPiece(ctx)
	if err != nil || index < 40 || term == 0 {
		t.Fatalf("backup piece: index %d term %d err %v", index, term, err)
	}
	piece, err := DecodeSnapshot(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	s := mustOpenSingle(t, dir, true)
	waitLeader(t, s)
	m, err := s.RestoreBackup(ctx, piece, 3)
	if err != nil {
		t.Fatal(err)
	}
	if m.Count != 2 || len(m.Replicas[0]) != 1 || m.Replicas[1][0] != "m1" || m.ClusterID == old.ShardMap().ClusterID || m.ClusterID == "" {
		t.Fatalf("restored map %+v", m)
	}
	if got := len(s.Queues()); got != 40 {
		t.Fatalf("%d queues restored, want 40", got)
	}
	if _, err := s.RestoreBackup(ctx, piece, 3); !errors.Is(err, ErrAlreadyPlaced) {
		t.Fatalf("second restore: %v, want ErrAlreadyPlaced", err)
	}
	if _, err := s.CreateQueue(ctx, "after", nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Queue("after"); !ok {
		t.Fatal("a queue created after the restore did not apply")
	}
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	r := mustOpenSingle(t, dir, false)
	waitLeader(t, r)
	// The log after the snapshot applies once the leader commits again.
	if err := r.Raft().Barrier(5 * time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Queue("after"); !ok || len(r.Queues()) != 41 || r.ShardMap().Count != 2 {
		t.Fatalf("after restart: %d queues, map %+v", len(r.Queues()), r.ShardMap())
	}
}

func TestStore_BackupPieceOnlyOnTheLeader(t *testing.T) {
	s := mustOpenSingle(t, t.TempDir(), false) // never bootstrapped: no leader
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var nl *raftgroup.NotLeaderError
	if _, _, _, err := s.BackupPiece(ctx); !errors.As(err, &nl) {
		t.Fatalf("BackupPiece off the leader: %v", err)
	}
	if _, err := s.RestoreBackup(ctx, nil, 3); !errors.As(err, &nl) {
		t.Fatalf("RestoreBackup off the leader: %v", err)
	}
}

// A backup of a grown cluster restores with its slot table, so every key
// routes to the shard whose piece holds its messages and dedup key, and
// with its slot moves, a finished one put back in ROUTE for its driver to
// finish again against the restored shard pieces.
func TestStore_RestoreKeepsTheSlotTable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	old := mustOpenSingle(t, t.TempDir(), true)
	waitLeader(t, old)
	if _, err := old.PlaceShards(ctx, 2, 3); err != nil {
		t.Fatal(err)
	}
	b, _, _, err := old.BackupPiece(ctx)
	if err != nil {
		t.Fatal(err)
	}
	piece, err := DecodeSnapshot(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	// As a growth from 1 to 2 shards leaves the map: slots written out,
	// half of them moved to shard 1 by move 1 (done), move 2 routing.
	sm := piece.GetShardMap()
	sm.Slots = 256
	sm.SlotOwners = make([]uint32, 256)
	for s := 128; s < 256; s++ {
		sm.SlotOwners[s] = 1
	}
	sm.NextSlotMoveId = 3
	sm.SlotMoves = []*metapb.SlotMove{
		{Id: 1, Slots: []uint32{128, 129}, From: 0, To: 1, Phase: metapb.SlotMovePhase_SLOT_MOVE_PHASE_DONE, DedupUntilMs: 77},
		{Id: 2, Slots: []uint32{130}, From: 0, To: 1, Phase: metapb.SlotMovePhase_SLOT_MOVE_PHASE_ROUTE, DedupUntilMs: 78},
	}

	s := mustOpenSingle(t, t.TempDir(), true)
	waitLeader(t, s)
	m, err := s.RestoreBackup(ctx, piece, 3)
	if err != nil {
		t.Fatal(err)
	}
	tab := m.Table()
	if tab.Slots != 256 || tab.Owner(0) != 0 || tab.Owner(200) != 1 || m.NextSlotMoveID != 3 {
		t.Fatalf("restored table: %d slots, owner(0)=%d owner(200)=%d, next move %d", tab.Slots, tab.Owner(0), tab.Owner(200), m.NextSlotMoveID)
	}
	if len(m.SlotMoves) != 2 || m.SlotMoves[0].Phase != metapb.SlotMovePhase_SLOT_MOVE_PHASE_ROUTE ||
		m.SlotMoves[1].Phase != metapb.SlotMovePhase_SLOT_MOVE_PHASE_ROUTE || m.SlotMoves[0].DedupUntilMs != 77 {
		t.Fatalf("restored slot moves: %+v", m.SlotMoves)
	}
}
