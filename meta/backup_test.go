package meta

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

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
