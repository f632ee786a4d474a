package raftstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc64"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hashicorp/raft"
)

// A replica's snapshots are raft's file snapshot store in its directory
// (raftgroup/raft.go opens it there): snapshots/<name>/meta.json, which holds
// the snapshot's metadata and a CRC-64 (ECMA) of snapshots/<name>/state.bin.
// A snapshot being written is snapshots/<name>.tmp; raft ignores those.
// They are read here directly because raft's store writes a test file into
// the directory when it is opened.
const (
	snapshotsDirName = "snapshots"
	snapshotMetaName = "meta.json"
	snapshotStateBin = "state.bin"
	snapshotTmp      = ".tmp"
)

// snapshotFile is one finished snapshot on disk.
type snapshotFile struct {
	raft.SnapshotMeta
	CRC []byte
	dir string
}

// listSnapshots returns the finished snapshots of the replica in w, newest
// first in raft's order (term, then index, then name), and a problem for
// each whose metadata cannot be read: raft would skip such a snapshot
// silently, but it finished writing it, so its bytes were damaged since.
func (w *where) listSnapshots() ([]snapshotFile, []*DamageError, error) {
	root := w.path(snapshotsDirName)
	entries, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("list snapshots: %w", err)
	}
	var snaps []snapshotFile
	var problems []*DamageError
	for _, e := range entries {
		if !e.IsDir() || strings.HasSuffix(e.Name(), snapshotTmp) {
			continue
		}
		dir := filepath.Join(root, e.Name())
		s, err := readSnapshotMeta(dir)
		if err != nil {
			problems = append(problems, w.damage(ReasonUnreadable, filepath.Join(dir, snapshotMetaName), 0, "snapshot %s: %v", e.Name(), err))
			continue
		}
		snaps = append(snaps, s)
	}
	slices.SortFunc(snaps, func(a, b snapshotFile) int {
		switch {
		case a.Term != b.Term:
			return cmpDesc(a.Term, b.Term)
		case a.Index != b.Index:
			return cmpDesc(a.Index, b.Index)
		}
		return strings.Compare(b.ID, a.ID)
	})
	return snaps, problems, nil
}

func cmpDesc(a, b uint64) int {
	if a > b {
		return -1
	}
	return 1
}

func readSnapshotMeta(dir string) (snapshotFile, error) {
	b, err := os.ReadFile(filepath.Join(dir, snapshotMetaName))
	if err != nil {
		return snapshotFile{}, err
	}
	s := snapshotFile{dir: dir}
	if err := json.Unmarshal(b, &s); err != nil {
		return snapshotFile{}, fmt.Errorf("parse %s: %w", snapshotMetaName, err)
	}
	if s.Version < raft.SnapshotVersionMin || s.Version > raft.SnapshotVersionMax {
		return snapshotFile{}, fmt.Errorf("snapshot version %d is not supported", s.Version)
	}
	return s, nil
}

// checkSnapshot reads s's state.bin and compares its CRC-64 with the one
// raft recorded when it wrote the snapshot, as raft does before it
// restores one.
func (w *where) checkSnapshot(s snapshotFile) *DamageError {
	path := filepath.Join(s.dir, snapshotStateBin)
	f, err := os.Open(path)
	if err != nil {
		return w.damage(ReasonUnreadable, path, s.Index, "snapshot %s: %v", s.ID, err)
	}
	defer f.Close()
	h := crc64.New(crc64.MakeTable(crc64.ECMA))
	n, err := io.Copy(h, f)
	if err != nil {
		return w.damage(ReasonUnreadable, path, s.Index, "snapshot %s: read state: %v", s.ID, err)
	}
	if got := h.Sum(nil); !bytes.Equal(got, s.CRC) {
		return w.damage(ReasonSnapshot, path, s.Index,
			"snapshot %s (index %d, term %d): state.bin has %d bytes and CRC-64 %x, it was written with %d bytes and CRC-64 %x",
			s.ID, s.Index, s.Term, n, got, s.Size, s.CRC)
	}
	return nil
}
