package raftgroup

import (
	"fmt"
	"io/fs"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"

	"github.com/raftq/raftq/raftstore"
)

func TestClassifyWrite(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want DiskErrorKind
	}{
		{"write ENOSPC", &fs.PathError{Op: "write", Path: "seg", Err: syscall.ENOSPC}, DiskNoSpace},
		{"write EDQUOT", &fs.PathError{Op: "write", Path: "seg", Err: syscall.EDQUOT}, DiskNoSpace},
		{"bare ENOSPC (fallocate, bbolt)", fmt.Errorf("commit: %w", syscall.ENOSPC), DiskNoSpace},
		{"fsync ENOSPC", &fs.PathError{Op: "sync", Path: "seg", Err: syscall.ENOSPC}, DiskFatal},
		{"fsync EIO", &fs.PathError{Op: "sync", Path: "seg", Err: syscall.EIO}, DiskFatal},
		{"write EIO", &fs.PathError{Op: "write", Path: "seg", Err: syscall.EIO}, DiskFatal},
		{"read-only fs", &fs.PathError{Op: "open", Path: "seg", Err: syscall.EROFS}, DiskFatal},
		{"broken store, even for lack of space", fmt.Errorf("%w: %w", raftstore.ErrStoreBroken, syscall.ENOSPC), DiskFatal},
		{"closed wal", wal.ErrClosed, 0},
		{"nil", nil, 0},
	} {
		if got := classifyWrite(tc.err); got != tc.want {
			t.Errorf("%s: classifyWrite(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// A stable-store write refused for lack of space waits for space instead
// of failing (raft panics when it cannot persist its term), and counts as
// a stall while it waits.
func TestStableWriteWaitsForSpace(t *testing.T) {
	var (
		mu    sync.Mutex
		calls []bool
	)
	w := NewDiskWatch(DiskWatchConfig{Group: "g", Dir: t.TempDir(), Options: DiskOptions{
		StallAfter: 100 * time.Millisecond,
		OnFatal:    func(err error) { t.Errorf("OnFatal(%v)", err) },
	}})
	defer w.Close()
	w.space = func(string) (uint64, uint64, error) { return 0, 1, nil }
	w.Attach(func(on bool) { mu.Lock(); calls = append(calls, on); mu.Unlock() }, nil)
	var full atomic.Bool
	full.Store(true)
	st := w.stableStore(&fakeStable{fail: func() error {
		if full.Load() {
			return syscall.ENOSPC
		}
		return nil
	}})
	done := make(chan error, 1)
	go func() { done <- st.SetUint64([]byte("CurrentTerm"), 7) }()
	waitFor(t, 10*time.Second, "the waiting write to count as a stall", func() bool { return w.Stats().Stalled })
	select {
	case err := <-done:
		t.Fatalf("SetUint64 returned %v while the disk was full", err)
	default:
	}
	full.Store(false)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("SetUint64 after space came back: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("SetUint64 did not finish once space came back")
	}
	stats := w.Stats()
	mu.Lock()
	defer mu.Unlock()
	if stats.Stalled || stats.Stalls != 1 || !stats.Full || !slices.Equal(calls, []bool{true, false}) {
		t.Fatalf("stats %+v, stall reports %v; want one finished stall and the no-space episode open", stats, calls)
	}
}

type fakeStable struct {
	raft.StableStore
	fail func() error
}

func (f *fakeStable) SetUint64([]byte, uint64) error { return f.fail() }

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
