package raftgroup

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"

	"github.com/raftq/raftq/internal/testenv"
	"github.com/raftq/raftq/raftstore"
)

// mountTmpfs mounts a tmpfs of size on a new directory, unmounted when the
// test ends.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireTools(t, "mount", "umount")
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		testenv.SkipOrFail(t, "mount tmpfs: "+err.Error()+": "+string(out))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// fillDisk writes a ballast file in dir until the filesystem is full, then
// shrinks it so about leave bytes are free.
func fillDisk(t *testing.T, dir string, leave int64) string {
	t.Helper()
	path := filepath.Join(dir, "ballast")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	for i := range buf {
		buf[i] = byte(i)
	}
	var n int64
	for {
		w, err := f.Write(buf)
		n += int64(w)
		if err != nil {
			break
		}
	}
	if err := f.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		t.Logf("close ballast: %v", err)
	}
	if err := os.Truncate(path, max(n-leave, 0)); err != nil {
		t.Fatal(err)
	}
	return path
}

// On a real full filesystem raft-wal cannot preallocate its next segment
// and seals itself for good; the store opens it again and goes on, so the
// append fails only for lack of space (not "sealed"), succeeds once space
// is freed, and the log is whole, also after a restart.
func TestReopenWALAfterFailedRotation(t *testing.T) {
	dir := mountTmpfs(t, "8m")
	logger := testLogger()
	const seg = 1 << 20
	w := NewDiskWatch(DiskWatchConfig{Group: "g", Dir: dir, Logger: logger})
	defer w.Close()
	open := func() *raftstore.Replica {
		t.Helper()
		rep, err := raftstore.Open(raftstore.Options{Dir: dir, NodeID: "n1", Group: "g", LogStore: LogStoreWAL,
			WALSegmentBytes: seg, Logger: logger, WrapLogs: w.logStore})
		if err != nil {
			t.Fatal(err)
		}
		if err := rep.MarkReady(); err != nil {
			t.Fatal(err)
		}
		return rep
	}
	rep := open()
	// Open files would keep the filesystem from unmounting.
	t.Cleanup(func() { _ = rep.Close() })
	logs := rep.Logs()
	ballast := fillDisk(t, dir, 3*seg/2)

	data := make([]byte, 16<<10)
	next := uint64(1)
	store := func() error {
		a, b := raftstore.Command(data), raftstore.Command(data)
		a.Index, a.Term, b.Index, b.Term = next, 1, next+1, 1
		err := logs.StoreLogs([]*raft.Log{&a, &b})
		if err == nil {
			next += 2
		}
		return err
	}
	for i := 0; ; i++ {
		err := store()
		if err == nil {
			if i > 10000 {
				t.Fatal("the filesystem never filled")
			}
			continue
		}
		if !errors.Is(err, ErrNoSpace) || errors.Is(err, wal.ErrSealed) {
			t.Fatalf("append %d on a full disk: %v, want no space (not sealed)", next, err)
		}
		break
	}
	if !w.Stats().Full {
		t.Fatal("the watch did not record the no-space episode")
	}
	t.Logf("appended %d entries before the disk was full", next-1)
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if err := store(); err != nil {
			t.Fatalf("append %d after freeing space: %v", next, err)
		}
	}
	readAll := func(s raft.LogStore) {
		t.Helper()
		var l raft.Log
		for i := uint64(1); i < next; i++ {
			if err := s.GetLog(i, &l); err != nil || l.Index != i {
				t.Fatalf("read entry %d: %v (got index %d)", i, err, l.Index)
			}
		}
	}
	readAll(logs)
	if err := rep.Close(); err != nil {
		t.Fatal(err)
	}
	rep = open()
	if last, err := rep.Logs().LastIndex(); err != nil || last != next-1 {
		t.Fatalf("last index after reopening: %d, %v; want %d", last, err, next-1)
	}
	if err := rep.CheckCovered(0); err != nil {
		t.Fatalf("facts after the episode: %v", err)
	}
	readAll(rep.Logs())
}
