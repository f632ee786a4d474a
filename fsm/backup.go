package fsm

import (
	"bufio"
	"fmt"
	"io"
)

// WriteBackup writes the state as a snapshot stream (the bytes a raft
// snapshot of this FSM holds) to w and returns the applied index it
// belongs to. Like Snapshot it holds the lock only to take copy-on-write
// clones, so a busy shard keeps applying while the stream is written.
func (f *FSM) WriteBackup(w io.Writer) (uint64, error) {
	f.mu.Lock()
	v := f.s.view(true)
	f.mu.Unlock()
	bw := bufio.NewWriterSize(w, 64<<10)
	if err := v.write(bw); err != nil {
		return 0, fmt.Errorf("write backup: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return 0, fmt.Errorf("write backup: %w", err)
	}
	return v.header.GetAppliedIndex(), nil
}

// SnapshotSummary is what a snapshot stream holds, as CheckSnapshot reads
// it.
type SnapshotSummary struct {
	AppliedIndex            uint64
	Queues, Messages, Dedup uint64
}

// CheckSnapshot decodes a whole snapshot stream as Restore would (every
// record, the indexes, the trailer's counts) without keeping it.
func CheckSnapshot(r io.Reader) (SnapshotSummary, error) {
	s, err := readSnapshot(r)
	if err != nil {
		return SnapshotSummary{}, err
	}
	return SnapshotSummary{
		AppliedIndex: s.applied,
		Queues:       uint64(len(s.queues)),
		Messages:     uint64(s.byID.Len()),
		Dedup:        uint64(s.dedupExpiry.Len()),
	}, nil
}
