package raftstore

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
)

// ErrStoreBroken marks a log store that can no longer be used at all; a
// write that meets it is fatal (shard's classifyWrite), whatever the cause.
var ErrStoreBroken = errors.New("raft log store unusable")

// reopenWAL is the raft-wal log store with one repair. raft-wal seals a
// segment in the append that fills it and creates the next one in a
// background goroutine; when that fails (no room for the new segment's
// first blocks, say) it only logs "rotate error", and every later append fails
// with ErrSealed, even once space is back. Opening the WAL again recovers:
// the sealed segment and the metadata written before the failure describe
// a consistent log, a half-created next segment is recovered as an empty
// tail, and appends go on (TestReopenWALAfterFailedRotation). The sealed
// append that failed wrote nothing, so it is simply tried again.
//
// Reads, appends and truncations share a read lock; reopening takes the
// write lock, so nothing sees the WAL while it is closed.
type reopenWAL struct {
	open   func() (*wal.WAL, error)
	dir    string
	logger *slog.Logger

	mu     sync.RWMutex
	w      *wal.WAL
	broken error // set when reopening failed: the store is closed for good
	stuck  bool  // still sealed after a reopen; logged once
}

func openReopenWAL(dir string, logger *slog.Logger, open func() (*wal.WAL, error)) (*reopenWAL, error) {
	w, err := open()
	if err != nil {
		return nil, err
	}
	return &reopenWAL{open: open, dir: dir, logger: logger, w: w}, nil
}

func (r *reopenWAL) cur() (*wal.WAL, func(), error) {
	r.mu.RLock()
	if r.broken != nil {
		r.mu.RUnlock()
		return nil, func() {}, r.broken
	}
	return r.w, r.mu.RUnlock, nil
}

func (r *reopenWAL) FirstIndex() (uint64, error) {
	w, done, err := r.cur()
	defer done()
	if err != nil {
		return 0, err
	}
	return w.FirstIndex()
}

func (r *reopenWAL) LastIndex() (uint64, error) {
	w, done, err := r.cur()
	defer done()
	if err != nil {
		return 0, err
	}
	return w.LastIndex()
}

func (r *reopenWAL) GetLog(index uint64, l *raft.Log) error {
	w, done, err := r.cur()
	defer done()
	if err != nil {
		return err
	}
	return w.GetLog(index, l)
}

func (r *reopenWAL) StoreLog(l *raft.Log) error { return r.StoreLogs([]*raft.Log{l}) }

func (r *reopenWAL) StoreLogs(logs []*raft.Log) error {
	err := r.store(logs)
	if !errors.Is(err, wal.ErrSealed) {
		return err
	}
	if err := r.reopen(); err != nil {
		return err
	}
	err = r.store(logs)
	if errors.Is(err, wal.ErrSealed) {
		r.mu.Lock()
		first := !r.stuck
		r.stuck = true
		r.mu.Unlock()
		if first {
			// The tail was sealed but its successor never recorded:
			// raft-wal v0.4.2 does not rotate a sealed tail it recovers
			// (a process that died between the sealing append and the
			// rotation leaves this too). Only rebuilding the replica helps.
			r.logger.Error("raft log cannot append: its last segment is sealed and raft-wal did not start a new one; rebuild this replica",
				"dir", r.dir, "err", err)
			// Recorded so that the restart that follows the fatal write
			// error leaves this replica out (for repair) instead of
			// failing the same way in a loop.
			d := damage(filepath.Dir(r.dir), "", ReasonSegment, r.dir, logs[0].Index,
				"raft-wal cannot append: its last segment was sealed and no new segment was started (an interrupted segment rotation)")
			if merr := MarkDamaged(d); merr != nil {
				r.logger.Error("could not record replica damage", "err", merr)
			}
		}
	}
	return err
}

func (r *reopenWAL) store(logs []*raft.Log) error {
	w, done, err := r.cur()
	defer done()
	if err != nil {
		return err
	}
	return w.StoreLogs(logs)
}

// reopen closes the WAL and opens it again. If that fails the store is
// unusable from then on (ErrStoreBroken: fatal to the node).
func (r *reopenWAL) reopen() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.broken != nil {
		return r.broken
	}
	r.logger.Warn("raft log segment rotation failed; opening the log again", "dir", r.dir)
	if err := r.w.Close(); err != nil {
		r.logger.Warn("closing the raft log before reopening it", "dir", r.dir, "err", err)
	}
	w, err := r.open()
	if err != nil {
		r.broken = fmt.Errorf("%w: reopening %s after a failed segment rotation: %w", ErrStoreBroken, r.dir, err)
		return r.broken
	}
	r.w = w
	return nil
}

func (r *reopenWAL) DeleteRange(lo, hi uint64) error {
	w, done, err := r.cur()
	defer done()
	if err != nil {
		return err
	}
	return w.DeleteRange(lo, hi)
}

// IsMonotonic passes raft-wal's answer on: raft removes the whole log
// after a snapshot restore only for monotonic stores.
func (r *reopenWAL) IsMonotonic() bool { return true }

// Close closes the current WAL.
func (r *reopenWAL) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.broken != nil {
		return nil
	}
	return r.w.Close()
}

var (
	_ raft.LogStore          = (*reopenWAL)(nil)
	_ raft.MonotonicLogStore = (*reopenWAL)(nil)
)
