package raftstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
)

// walView is a raft-wal log as raft-wal's Open would recover it, read
// without writing anything: sealed segments through raft-wal's segment
// reader, the tail through raft-wal's own tail recovery (which finds the
// last complete commit and drops a torn one) on a file opened read-only.
// raft-wal's Open cannot be used to check a log: it commits metadata,
// creates a tail segment and deletes files it does not list.
type walView struct {
	segs  []viewSegment // the metadata's order: ascending base index
	tail  types.SegmentWriter
	codec wal.BinaryCodec
}

type viewSegment struct {
	info types.SegmentInfo
	r    types.SegmentReader
}

// openWALView opens the segments raft-wal's metadata lists (walState), as
// raft-wal's Open does: the codec must be raft-wal's binary one and only
// the last segment may be unsealed. file names the segment that does not
// open.
func openWALView(walDir string, segs []types.SegmentInfo) (v *walView, file string, err error) {
	v = &walView{}
	defer func() {
		if err != nil {
			_ = v.Close()
		}
	}()
	filer := segment.NewFiler(walDir, readOnlyVFS{})
	for i, si := range segs {
		file = segmentFile(walDir, si)
		if si.Codec != v.codec.ID() {
			return nil, file, fmt.Errorf("segment %d uses codec %d, raft-wal's is %d", si.ID, si.Codec, v.codec.ID())
		}
		if si.SealTime.IsZero() {
			if i < len(segs)-1 {
				return nil, file, fmt.Errorf("segment %d is unsealed but not the last one", si.ID)
			}
			w, err := filer.RecoverTail(si)
			if err != nil {
				return nil, file, fmt.Errorf("recover tail segment %d: %w", si.ID, err)
			}
			v.tail = w
			v.segs = append(v.segs, viewSegment{info: si, r: w})
			continue
		}
		r, err := filer.Open(si)
		if err != nil {
			return nil, file, fmt.Errorf("open segment %d: %w", si.ID, err)
		}
		v.segs = append(v.segs, viewSegment{info: si, r: r})
	}
	return v, "", nil
}

func (v *walView) tailLast() uint64 {
	if v.tail == nil {
		return 0
	}
	return v.tail.LastIndex()
}

// FirstIndex is raft-wal's: the head segment's lowest index, 0 when the
// log is empty.
func (v *walView) FirstIndex() (uint64, error) {
	if len(v.segs) == 0 {
		return 0, nil
	}
	head := v.segs[0].info
	if head.SealTime.IsZero() && v.tailLast() == 0 {
		return 0, nil
	}
	return head.MinIndex, nil
}

// LastIndex is raft-wal's: the tail's last committed index or, when the
// tail is still empty, the entry before it.
func (v *walView) LastIndex() (uint64, error) {
	if last := v.tailLast(); last > 0 {
		return last, nil
	}
	if v.tail == nil || len(v.segs) < 2 {
		return 0, nil
	}
	base := v.segs[len(v.segs)-1].info.BaseIndex
	if base == 0 {
		return 0, nil
	}
	return base - 1, nil
}

// GetLog finds index as raft-wal does: in the tail first, then in the
// segment with the highest base index at or below it, within its
// logical range (head and tail truncations narrow it).
func (v *walView) GetLog(index uint64, l *raft.Log) error {
	raw, err := v.find(index)
	if err != nil {
		return err
	}
	defer raw.Close()
	return v.codec.Decode(raw.Bs, l)
}

func (v *walView) find(index uint64) (*types.PooledBuffer, error) {
	if v.tail != nil {
		raw, err := v.tail.GetLog(index)
		if err == nil {
			return raw, nil
		}
		if !errors.Is(err, types.ErrNotFound) {
			return nil, err
		}
	}
	for i := len(v.segs) - 1; i >= 0; i-- {
		s := v.segs[i]
		if s.info.BaseIndex > index {
			continue
		}
		if s.info.MinIndex <= index && (s.info.MaxIndex == 0 || s.info.MaxIndex >= index) {
			return s.r.GetLog(index)
		}
		break
	}
	return nil, types.ErrNotFound
}

// Close closes every segment file.
func (v *walView) Close() error {
	var errs []error
	for _, s := range v.segs {
		errs = append(errs, s.r.Close())
	}
	v.segs, v.tail = nil, nil
	return errors.Join(errs...)
}

// errReadOnly answers every write a read-only view is asked for; raft-wal's
// tail recovery and segment reader make none (they only read the file).
var errReadOnly = errors.New("raftstore: a read-only view of the log does not write")

// readOnlyVFS gives raft-wal's segment code files opened read-only.
type readOnlyVFS struct{}

func (readOnlyVFS) ListDir(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if !e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

func (readOnlyVFS) Create(string, string, uint64) (types.WritableFile, error) {
	return nil, errReadOnly
}
func (readOnlyVFS) Delete(string, string) error { return errReadOnly }

func (readOnlyVFS) OpenReader(dir, name string) (types.ReadableFile, error) {
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return nil, err
	}
	return f, nil
}

// OpenWriter is how raft-wal opens the tail segment to recover it.
func (readOnlyVFS) OpenWriter(dir, name string) (types.WritableFile, error) {
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return nil, err
	}
	return readOnlyFile{f}, nil
}

type readOnlyFile struct{ *os.File }

func (readOnlyFile) WriteAt([]byte, int64) (int, error) { return 0, errReadOnly }
func (readOnlyFile) Sync() error                        { return errReadOnly }

var _ logReader = (*walView)(nil)
