package raftgroup

import (
	"os"
	"path/filepath"
	"sync"

	"github.com/hashicorp/raft"
)

// A snapshot may keep snapshotDirtyWindow bytes in the page cache; beyond
// that its older pages are sent to disk in steps of snapshotWritebackStep.
// raft's file sink fsyncs only at Close, and the kernel's own writeback
// starts at a share of RAM (10 % by default: gigabytes), so a gigabyte
// snapshot (a 1 M-message backlog of 1 KiB bodies) would go to disk in one
// burst at its end, with the log's fdatasync queued behind it. Snapshots
// within the window (a steady shard's dedup keys and in-flight messages:
// tens of MB) are left to the one flush at Close: writing them back early
// lengthened the enqueue tail under steady load.
const (
	snapshotDirtyWindow   = 128 << 20
	snapshotWritebackStep = 8 << 20
)

// writebackStore is raft's file snapshot store whose sinks keep at most a
// window of their pages dirty, and which deletes old snapshots itself, a
// step at a time (snapreap.go): raft's store must be opened with
// raftNeverReaps.
type writebackStore struct {
	*raft.FileSnapshotStore
	dir          string // the store's base directory, as given to raft
	window, step int64
	retain       int
	reapMu       sync.Mutex
	trash        *trash
}

func newWritebackStore(store *raft.FileSnapshotStore, dir string, window, step int64, retain int) *writebackStore {
	return &writebackStore{
		FileSnapshotStore: store, dir: dir, window: window, step: step, retain: retain,
		trash: newTrash(filepath.Join(dir, "snapshots-reaped"), snapshotReapStep, snapshotReapPause),
	}
}

// Close stops the background deletion of reaped snapshots.
func (s *writebackStore) Close() error { return s.trash.Close() }

func (s *writebackStore) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.FileSnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	// raft writes a snapshot to <dir>/snapshots/<id>.tmp/state.bin and
	// renames the directory at Close (hashicorp/raft file_snapshot.go).
	// Writeback works on the file, not the descriptor, so a second
	// descriptor of our own can start it.
	path := filepath.Join(s.dir, "snapshots", sink.ID()+".tmp", "state.bin")
	return &writebackSink{SnapshotSink: sink, store: s, path: path, window: s.window, step: s.step}, nil
}

// writebackSink sends what it wrote more than window bytes ago to disk, a
// step at a time. It is best effort: if the file cannot be opened (raft
// changed its layout) the snapshot is written exactly as before.
type writebackSink struct {
	raft.SnapshotSink
	store        *writebackStore
	path         string
	window, step int64
	written      int64
	started      int64 // writeback has been started for [0, started)
	f            *os.File
	unavailable  bool
}

func (w *writebackSink) Write(p []byte) (int, error) {
	n, err := w.SnapshotSink.Write(p)
	w.written += int64(n)
	if end := w.written - w.window; end-w.started >= w.step {
		w.startWriteback(w.started, end)
		w.started = end
	}
	return n, err
}

func (w *writebackSink) startWriteback(from, to int64) {
	if w.unavailable {
		return
	}
	if w.f == nil {
		f, err := os.Open(w.path)
		if err != nil {
			w.unavailable = true
			return
		}
		w.f = f
	}
	// Errors here change nothing: the sink's own fsync at Close is what
	// makes the snapshot durable.
	_ = startWriteback(w.f, from, to-from)
}

func (w *writebackSink) Close() error {
	w.closeFile()
	if err := w.SnapshotSink.Close(); err != nil {
		return err
	}
	// As raft's own sink does, a snapshot whose predecessors could not be
	// reaped reports the error.
	return w.store.reap()
}

func (w *writebackSink) Cancel() error {
	w.closeFile()
	return w.SnapshotSink.Cancel()
}

func (w *writebackSink) closeFile() {
	if w.f != nil {
		_ = w.f.Close()
		w.f = nil
	}
}
