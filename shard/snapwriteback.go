package shard

import (
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"
)

// snapshotWritebackEvery is how much of a snapshot may sit dirty in the page
// cache before its writeback is started. raft's file sink fsyncs only at
// Close, and the kernel's own writeback starts at a share of RAM (10 % by
// default: gigabytes), so a 1 GB snapshot (a 1 M-message backlog of 1 KiB
// bodies) went to disk in one burst at its end, and the log's fdatasync
// queued behind it for a second or more (docs/benchmarks.md, "Scheduled
// lateness").
const snapshotWritebackEvery = 32 << 20

// writebackStore is raft's file snapshot store whose sinks push their pages
// to disk as they are written.
type writebackStore struct {
	*raft.FileSnapshotStore
	dir   string // the store's base directory, as given to raft
	every int64
}

func newWritebackStore(store *raft.FileSnapshotStore, dir string, every int64) *writebackStore {
	return &writebackStore{FileSnapshotStore: store, dir: dir, every: every}
}

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
	return &writebackSink{SnapshotSink: sink, path: path, every: s.every}, nil
}

// writebackSink starts the writeback of what it has written every `every`
// bytes. It is best effort: if the file cannot be opened (raft changed its
// layout) the snapshot is written exactly as before.
type writebackSink struct {
	raft.SnapshotSink
	path             string
	every            int64
	written, started int64
	f                *os.File
	unavailable      bool
}

func (w *writebackSink) Write(p []byte) (int, error) {
	n, err := w.SnapshotSink.Write(p)
	w.written += int64(n)
	if w.written-w.started >= w.every {
		w.started = w.written
		w.startWriteback()
	}
	return n, err
}

func (w *writebackSink) startWriteback() {
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
	_ = startWriteback(w.f)
}

func (w *writebackSink) Close() error {
	w.closeFile()
	return w.SnapshotSink.Close()
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
