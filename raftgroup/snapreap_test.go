package raftgroup

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func openReapStore(t *testing.T, dir string, retain int) *writebackStore {
	t.Helper()
	files, err := raft.NewFileSnapshotStore(dir, raftNeverReaps, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	s := newWritebackStore(files, dir, 1<<20, 256<<10, retain)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func writeSnapshot(t *testing.T, s *writebackStore, index uint64, body []byte) {
	t.Helper()
	sink, err := s.Create(raft.SnapshotVersionMax, index, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write(body); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
}

// waitEmpty waits for the reaper to empty dir (or for dir to be absent).
func waitEmpty(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		entries, err := os.ReadDir(dir)
		if errors.Is(err, os.ErrNotExist) || (err == nil && len(entries) == 0) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still holds %d entries (err %v)", dir, len(entries), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The store keeps the newest retain snapshots readable, moves the rest out
// of raft's sight at once and deletes them in the background.
func TestReapKeepsTheNewestAndDeletesTheRest(t *testing.T) {
	dir := t.TempDir()
	s := openReapStore(t, dir, 2)
	bodies := map[uint64][]byte{}
	for i := uint64(1); i <= 5; i++ {
		bodies[i] = bytes.Repeat([]byte{byte(i)}, 3<<20+int(i))
		writeSnapshot(t, s, 10*i, bodies[i])
		metas, err := s.List()
		if err != nil {
			t.Fatal(err)
		}
		if want := min(int(i), 2); len(metas) != want {
			t.Fatalf("after snapshot %d: %d listed, want %d", i, len(metas), want)
		}
		if metas[0].Index != 10*i {
			t.Fatalf("after snapshot %d: newest listed is index %d", i, metas[0].Index)
		}
	}
	metas, _ := s.List()
	for _, m := range metas {
		_, rc, err := s.Open(m.ID)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		_ = rc.Close()
		if err != nil || !bytes.Equal(got, bodies[m.Index/10]) {
			t.Fatalf("snapshot %s does not read back (err %v)", m.ID, err)
		}
	}
	waitEmpty(t, filepath.Join(dir, "snapshots-reaped"))
	entries, err := os.ReadDir(filepath.Join(dir, "snapshots"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Fatalf("snapshots/ holds %d entries, want the 2 kept", len(entries))
	}
}

// What a crash or shutdown left in the trash is deleted after the next
// start, and a closed store's reaper stops between steps.
func TestReapFinishesAfterRestart(t *testing.T) {
	dir := t.TempDir()
	trashDir := filepath.Join(dir, "snapshots-reaped", "1-10-123")
	if err := os.MkdirAll(trashDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(trashDir, "state.bin"), make([]byte, 5<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	openReapStore(t, dir, 2)
	waitEmpty(t, filepath.Join(dir, "snapshots-reaped"))
}

func TestRemoveGraduallyShrinksThenRemoves(t *testing.T) {
	dir := t.TempDir()
	snap := filepath.Join(dir, "snap")
	if err := os.MkdirAll(snap, 0o755); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(snap, "state.bin")
	if err := os.WriteFile(big, make([]byte, 10<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(snap, "meta.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}

	// Cancelled after its first step, it leaves a shorter file to finish
	// later, not a removed one.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := removeGradually(ctx, snap, 4<<20, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: err = %v", err)
	}
	st, err := os.Stat(big)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != 6<<20 {
		t.Fatalf("after one step the file is %d bytes, want %d", st.Size(), 6<<20)
	}

	if err := removeGradually(context.Background(), snap, 4<<20, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(snap); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("snapshot directory still there: %v", err)
	}
}

// BenchmarkSyncDuringReap measures what deleting a 1 GiB snapshot does to
// a log's fsync on the same disk: an appender writes 8 KiB and fsyncs in a
// loop while the file is deleted at once (what raft's store did) or step by
// step (snapreap.go). It reports the worst and the p99 append. It writes
// 1 GiB per iteration, so run it with -benchtime 1x.
func BenchmarkSyncDuringReap(b *testing.B) {
	for _, c := range []struct {
		name   string
		remove func(string) error
	}{
		{"at-once", os.RemoveAll},
		{"gradual", func(p string) error {
			return removeGradually(context.Background(), p, snapshotReapStep, snapshotReapPause)
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				worst, p99 := syncDuringRemove(b, c.remove)
				b.ReportMetric(float64(worst.Microseconds())/1000, "worst-sync-ms")
				b.ReportMetric(float64(p99.Microseconds())/1000, "p99-sync-ms")
			}
		})
	}
}

func syncDuringRemove(b *testing.B, remove func(string) error) (worst, p99 time.Duration) {
	dir := b.TempDir()
	big := filepath.Join(dir, "snap")
	if err := os.MkdirAll(big, 0o755); err != nil {
		b.Fatal(err)
	}
	f, err := os.Create(filepath.Join(big, "state.bin"))
	if err != nil {
		b.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for range 1024 {
		if _, err := f.Write(chunk); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	_ = f.Close()
	logf, err := os.Create(filepath.Join(dir, "log"))
	if err != nil {
		b.Fatal(err)
	}
	defer logf.Close()

	done := make(chan error, 1)
	go func() {
		time.Sleep(100 * time.Millisecond)
		err := remove(big)
		time.Sleep(200 * time.Millisecond)
		done <- err
	}()
	rec := make([]byte, 8<<10)
	var lat []time.Duration
	for off := int64(0); ; off += int64(len(rec)) {
		select {
		case err := <-done:
			if err != nil {
				b.Fatal(err)
			}
			slices.Sort(lat)
			return lat[len(lat)-1], lat[len(lat)*99/100]
		default:
		}
		t := time.Now()
		if _, err := logf.WriteAt(rec, off); err != nil {
			b.Fatal(err)
		}
		if err := logf.Sync(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t))
	}
}
