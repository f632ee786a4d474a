package raftgroup

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/hashicorp/raft"
)

// newTestSink opens a writeback store in a fresh directory and starts one
// snapshot in it.
func newTestSink(t *testing.T, window, step int64) (*writebackStore, raft.SnapshotSink) {
	t.Helper()
	dir := t.TempDir()
	files, err := raft.NewFileSnapshotStore(dir, raftNeverReaps, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	store := newWritebackStore(files, dir, window, step, 2)
	t.Cleanup(func() { _ = store.Close() })
	sink, err := store.Create(raft.SnapshotVersionMax, 10, 2, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	return store, sink
}

// The sink must find the file raft writes the snapshot to (or the writeback
// silently stops working when raft changes its layout), start writeback up
// to a window behind what it wrote, and the snapshot must read back byte
// for byte.
func TestWritebackSinkWritesRaftsSnapshotFile(t *testing.T) {
	store, sink := newTestSink(t, 1<<20, 256<<10)
	want := make([]byte, 3<<20+12345)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range want {
		want[i] = byte(r.Uint32())
	}
	for off := 0; off < len(want); off += 64 << 10 {
		if _, err := sink.Write(want[off:min(off+64<<10, len(want))]); err != nil {
			t.Fatal(err)
		}
	}
	w := sink.(*writebackSink)
	if w.unavailable || w.f == nil {
		t.Fatalf("sink did not open raft's state file %s: writeback never starts", w.path)
	}
	if lag := w.written - w.started; lag < w.window || lag >= w.window+w.step {
		t.Errorf("writeback started up to %d of %d bytes written; want it a 1 MiB window behind, within one 256 KiB step", w.started, w.written)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	if w.f != nil {
		t.Error("state file descriptor left open after Close")
	}
	metas, err := store.List()
	if err != nil || len(metas) != 1 {
		t.Fatalf("list: %v, %d snapshots; want 1", err, len(metas))
	}
	_, rc, err := store.Open(metas[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	got, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("snapshot read back %d bytes, not the %d written", len(got), len(want))
	}
}

// A cancelled snapshot leaves nothing behind and closes the extra descriptor.
func TestWritebackSinkCancel(t *testing.T) {
	store, sink := newTestSink(t, 1<<10, 1<<10)
	if _, err := sink.Write(make([]byte, 4<<10)); err != nil {
		t.Fatal(err)
	}
	w := sink.(*writebackSink)
	if w.f == nil {
		t.Fatal("state file not opened after 4 KiB at a 1 KiB step")
	}
	if err := sink.Cancel(); err != nil {
		t.Fatal(err)
	}
	if w.f != nil {
		t.Error("state file descriptor left open after Cancel")
	}
	if metas, err := store.List(); err != nil || len(metas) != 0 {
		t.Fatalf("list after cancel: %v, %d snapshots; want none", err, len(metas))
	}
}

// A snapshot within the window is left to raft's fsync at Close, as before
// the writeback existed: the file is never opened.
func TestWritebackSinkLeavesSmallSnapshotsAlone(t *testing.T) {
	_, sink := newTestSink(t, 1<<20, 256<<10)
	if _, err := sink.Write(make([]byte, 1<<20+128<<10)); err != nil {
		t.Fatal(err)
	}
	if w := sink.(*writebackSink); w.f != nil || w.started != 0 {
		t.Errorf("writeback started (up to %d) for a snapshot within its window", w.started)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
}
