package raftstore

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// snapshotStore makes two snapshots (indexes 10 and 20) in the replica's
// directory and returns the store and their ids, oldest first.
func snapshotStore(t *testing.T, dir string) (*raft.FileSnapshotStore, []string) {
	t.Helper()
	store, err := raft.NewFileSnapshotStoreWithLogger(dir, 5, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, idx := range []uint64{10, 20} {
		sink, err := store.Create(raft.SnapshotVersionMax, idx, 2, raft.Configuration{}, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sink.Write([]byte(strings.Repeat("state ", 1000))); err != nil {
			t.Fatal(err)
		}
		if err := sink.Close(); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sink.ID())
	}
	return store, ids
}

func flipFile(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// While raft starts, a snapshot that does not read back is damage, and
// no older snapshot is offered in its place (raft would restore it
// without a word).
func TestSnapshotThatDoesNotReadBackAtStartIsDamage(t *testing.T) {
	f := newFixture(t, LogStoreWAL)
	f.write(1, 30, 2)
	r := f.mustOpen()
	defer r.Close()
	store, ids := snapshotStore(t, f.dir)
	flipFile(t, filepath.Join(f.dir, "snapshots", ids[1], "state.bin"), 100)

	cs := r.CheckSnapshots(store)
	_, _, err := cs.Open(ids[1])
	d := wantDamage(t, err, ReasonSnapshot)
	if !strings.HasSuffix(d.File, ids[1]) || !strings.Contains(d.Detail, "CRC mismatch") {
		t.Fatalf("damage names %s: %s", d.File, d.Detail)
	}
	if _, _, err := cs.Open(ids[0]); err != d {
		t.Fatalf("the older, intact snapshot was offered after the newest failed: %v", err)
	}
	if cs.StartDamage() != d {
		t.Fatalf("StartDamage = %v", cs.StartDamage())
	}
	if f.damaged.Load() != nil {
		t.Fatal("damage at start was reported as found while running")
	}
}

// Once raft runs, only bytes that fail their checksum are damage (and stop
// the replica); a snapshot reaped between List and Open is not.
func TestSnapshotDamageWhileRunning(t *testing.T) {
	f := newFixture(t, LogStoreWAL)
	f.write(1, 30, 2)
	r := f.mustOpen()
	defer r.Close()
	store, ids := snapshotStore(t, f.dir)
	cs := r.CheckSnapshots(store)
	_, rc, err := cs.Open(ids[1])
	if err != nil {
		t.Fatalf("intact snapshot at start: %v", err)
	}
	if _, err := io.Copy(io.Discard, rc); err != nil {
		t.Fatal(err)
	}
	_ = rc.Close()
	cs.Running()

	if _, _, err := cs.Open("2-99-123"); err == nil {
		t.Fatal("a missing snapshot opened")
	} else if _, ok := IsDamage(err); ok || f.damaged.Load() != nil {
		t.Fatalf("a missing snapshot while running is damage: %v", err)
	}
	flipFile(t, filepath.Join(f.dir, "snapshots", ids[1], "state.bin"), 100)
	_, _, err = cs.Open(ids[1])
	wantDamage(t, err, ReasonSnapshot)
	if got := f.damaged.Load(); got == nil || got.Reason != ReasonSnapshot {
		t.Fatalf("owner told %+v", got)
	}
	if _, _, err := cs.Open(ids[0]); err != nil {
		t.Fatalf("while running, an intact snapshot after a damaged one: %v", err)
	}
}
