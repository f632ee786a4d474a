// Package diskfault damages a stopped raftq node's files the way a failing
// disk or a careless operator would: it deletes stores, cuts or zeroes the
// tail of a raft log segment, and flips bytes in segments and snapshots.
// The system tests (systest/damage_test.go) and jepsen-lite's damage
// nemesis use it; both check that the node finds the damage on its next
// start (raftstore) instead of voting or serving with less than it had.
//
// It knows the on-disk layout of docs/shard.md: <data-dir>/shards/<id>/
// and <data-dir>/meta/ each hold raft.db, facts, replica.json, wal/ (raft-
// wal segments named <base index>-<id>.wal, created at their full size,
// data first and zeros (or holes) after) and snapshots/<id>/{meta.json,state.bin}.
package diskfault

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
)

// SegmentHeader is the size of a raft-wal segment's file header: bytes
// before it are not entries.
const SegmentHeader = 32

// ShardDir is the directory of shard id's replica under a node's data dir.
func ShardDir(dataDir string, id uint32) string {
	return filepath.Join(dataDir, "shards", strconv.FormatUint(uint64(id), 10))
}

// MetaDir is the directory of the node's meta replica.
func MetaDir(dataDir string) string { return filepath.Join(dataDir, "meta") }

// Segments lists the raft-wal segment files of the replica in groupDir,
// oldest first (raft-wal names them by zero-padded base index).
func Segments(groupDir string) ([]string, error) {
	paths, err := filepath.Glob(filepath.Join(groupDir, "wal", "*.wal"))
	if err != nil {
		return nil, fmt.Errorf("list segments: %w", err)
	}
	slices.Sort(paths)
	return paths, nil
}

// NewestSegment is the segment file that holds the end of the log.
func NewestSegment(groupDir string) (string, error) {
	segs, err := Segments(groupDir)
	if err != nil {
		return "", err
	}
	if len(segs) == 0 {
		return "", fmt.Errorf("no log segment in %s", filepath.Join(groupDir, "wal"))
	}
	return segs[len(segs)-1], nil
}

// DataEnd is the offset just past the last non-zero byte of path: where
// the written part of a segment ends.
func DataEnd(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	end := len(b)
	for end > 0 && b[end-1] == 0 {
		end--
	}
	return int64(end), nil
}

// Find returns the offsets of every occurrence of needle in path.
func Find(path string, needle []byte) ([]int64, error) {
	if len(needle) == 0 {
		return nil, errors.New("find: empty needle")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var out []int64
	for off := 0; ; {
		i := bytes.Index(b[off:], needle)
		if i < 0 {
			return out, nil
		}
		out = append(out, int64(off+i))
		off += i + 1
	}
}

// FindIn returns the first file of paths that contains needle and the
// offset of its first occurrence.
func FindIn(paths []string, needle []byte) (string, int64, error) {
	for _, p := range paths {
		offs, err := Find(p, needle)
		if err != nil {
			return "", 0, err
		}
		if len(offs) > 0 {
			return p, offs[0], nil
		}
	}
	return "", 0, fmt.Errorf("%q not found in %d files", needle, len(paths))
}

// Flip inverts n bytes of path starting at off, in place, and syncs.
func Flip(path string, off int64, n int) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("flip: %w", err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("flip %s at %d: %w", path, off, err)
	}
	for i := range b {
		b[i] ^= 0xff
	}
	if _, err := f.WriteAt(b, off); err != nil {
		return fmt.Errorf("flip %s at %d: %w", path, off, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("flip %s: sync: %w", path, err)
	}
	return nil
}

// Zero overwrites path from off to its current data end with zeros,
// keeping the file's size: the writes after off never reached the disk,
// and nothing in the file's length says so.
func Zero(path string, off int64) error {
	end, err := DataEnd(path)
	if err != nil {
		return err
	}
	if off >= end {
		return fmt.Errorf("zero %s from %d: the data ends at %d", path, off, end)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("zero: %w", err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, end-off), off); err != nil {
		return fmt.Errorf("zero %s from %d: %w", path, off, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("zero %s: sync: %w", path, err)
	}
	return nil
}

// CutTail truncates path to cut bytes before the end of its data: the
// file is shorter and its last written entries are gone, as when a file
// is copied or restored short. It returns the new size.
func CutTail(path string, cut int64) (int64, error) {
	end, err := DataEnd(path)
	if err != nil {
		return 0, err
	}
	size := max(end-cut, SegmentHeader)
	if err := os.Truncate(path, size); err != nil {
		return 0, fmt.Errorf("cut %s: %w", path, err)
	}
	return size, nil
}

// Snapshots lists the state files of the replica's snapshots in groupDir,
// oldest first (by term, then index, as their meta.json records them).
func Snapshots(groupDir string) ([]string, error) {
	metas, err := filepath.Glob(filepath.Join(groupDir, "snapshots", "*", "meta.json"))
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	type snap struct {
		path        string
		term, index uint64
	}
	var snaps []snap
	for _, p := range metas {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
		var m struct{ Term, Index uint64 }
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("parse %s: %w", p, err)
		}
		snaps = append(snaps, snap{filepath.Join(filepath.Dir(p), "state.bin"), m.Term, m.Index})
	}
	slices.SortFunc(snaps, func(a, b snap) int {
		if a.term != b.term {
			return cmp.Compare(a.term, b.term)
		}
		return cmp.Compare(a.index, b.index)
	})
	out := make([]string, len(snaps))
	for i, s := range snaps {
		out[i] = s.path
	}
	return out, nil
}

// NewestSnapshot is the state file of the newest snapshot of the replica
// in groupDir.
func NewestSnapshot(groupDir string) (string, error) {
	snaps, err := Snapshots(groupDir)
	if err != nil {
		return "", err
	}
	if len(snaps) == 0 {
		return "", fmt.Errorf("no snapshot in %s", filepath.Join(groupDir, "snapshots"))
	}
	return snaps[len(snaps)-1], nil
}
