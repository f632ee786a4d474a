package raftgroup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Old snapshots are deleted a step at a time, in the background. raft's
// file store removes them with one os.RemoveAll when a new one is in
// place, and freeing a gigabyte file at once on ext4 (mounted with discard)
// holds every fsync on the disk meanwhile, the log appends of each replica
// sharing it included. Truncating snapshotReapStep at a time,
// snapshotReapPause apart, bounds that stall (BenchmarkSyncDuringReap;
// docs/benchmarks.md, "Component benchmarks").
const (
	snapshotReapStep  = 16 << 20
	snapshotReapPause = 20 * time.Millisecond
	// raftNeverReaps is the retain count given to raft's store, so that
	// only writebackStore.reap removes snapshots.
	raftNeverReaps = 1 << 30
)

// reap moves every snapshot beyond the newest retain into the trash
// directory and wakes the reaper. A rename is one directory entry, so the
// caller (raft's snapshot goroutine, or a follower's main loop installing
// a snapshot) is not held up. Only finalized snapshots are listed, so the
// one just closed is always among those kept.
//
// Unlike raft's unlink, truncation reaches a reader that still holds the
// file open: a leader streaming this snapshot to a follower for longer
// than two snapshot intervals would send a short stream. The follower
// refuses a snapshot shorter than its announced size and the leader sends
// its latest one instead, so that costs a retry, never a wrong state.
func (s *writebackStore) reap() error {
	s.reapMu.Lock()
	defer s.reapMu.Unlock()
	metas, err := s.List() // newest first
	if err != nil {
		return fmt.Errorf("reap snapshots: %w", err)
	}
	if len(metas) <= s.retain {
		return nil
	}
	if err := os.MkdirAll(s.trash.dir, 0o700); err != nil {
		return fmt.Errorf("reap snapshots: %w", err)
	}
	for _, m := range metas[s.retain:] {
		from := filepath.Join(s.dir, "snapshots", m.ID)
		if err := os.Rename(from, filepath.Join(s.trash.dir, m.ID)); err != nil {
			return fmt.Errorf("reap snapshot %s: %w", m.ID, err)
		}
	}
	s.trash.kick()
	return nil
}

// trash empties one directory in the background, gradually. Anything left
// in it by a crash or a shutdown is emptied after the next start.
type trash struct {
	dir   string
	step  int64
	pause time.Duration

	mu      sync.Mutex
	wake    chan struct{} // buffered: a kick while busy is not lost
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	started bool
}

func newTrash(dir string, step int64, pause time.Duration) *trash {
	ctx, cancel := context.WithCancel(context.Background())
	t := &trash{dir: dir, step: step, pause: pause, wake: make(chan struct{}, 1), ctx: ctx, cancel: cancel}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		t.kick()
	}
	return t
}

// kick starts the emptier on first use (a store that never reaps, or fails
// to open, leaves no goroutine behind) and wakes it.
func (t *trash) kick() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ctx.Err() != nil {
		return
	}
	if !t.started {
		t.started = true
		t.wg.Go(t.run)
	}
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

func (t *trash) run() {
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-t.wake:
		}
		entries, err := os.ReadDir(t.dir)
		if err != nil {
			continue // nothing to do, or try again at the next kick
		}
		for _, e := range entries {
			// Errors are left for the next kick or start: a snapshot in
			// the trash is garbage whatever happens to it.
			if err := removeGradually(t.ctx, filepath.Join(t.dir, e.Name()), t.step, t.pause); errors.Is(err, context.Canceled) {
				return
			}
		}
	}
}

// Close stops the emptier and waits for it; what is left stays for the next
// start.
func (t *trash) Close() error {
	t.mu.Lock()
	t.cancel()
	t.mu.Unlock()
	t.wg.Wait()
	return nil
}

// removeGradually shrinks every regular file directly in dir (a snapshot
// holds state.bin and meta.json) by step bytes at a time, pause apart, and
// then removes dir. path may also be a single file.
func removeGradually(ctx context.Context, path string, step int64, pause time.Duration) error {
	files := []string{path}
	if st, err := os.Stat(path); err != nil {
		return err
	} else if st.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return err
		}
		files = files[:0]
		for _, e := range entries {
			files = append(files, filepath.Join(path, e.Name()))
		}
	}
	for _, f := range files {
		st, err := os.Lstat(f)
		if err != nil || !st.Mode().IsRegular() {
			continue
		}
		for size := st.Size() - step; size > 0; size -= step {
			if err := os.Truncate(f, size); err != nil {
				return err
			}
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
	}
	return os.RemoveAll(path)
}
