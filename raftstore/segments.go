package raftstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/types"
	"go.etcd.io/bbolt"
)

// walState reads raft-wal's metadata without opening the WAL: read only,
// so `raftq-node verify` and the open-time checks change nothing.
func walState(walDir string) (types.PersistentState, error) {
	var st types.PersistentState
	path := filepath.Join(walDir, walMetaName)
	db, err := bbolt.Open(path, 0o600, readOnlyBolt())
	if err != nil {
		return st, inUse(path, fmt.Errorf("open %s: %w", path, err))
	}
	defer db.Close()
	err = db.View(func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte(metadb.MetaBucket))
		if b == nil {
			return nil
		}
		raw := b.Get([]byte(metadb.MetaKey))
		if raw == nil {
			return nil
		}
		return json.Unmarshal(raw, &st)
	})
	if err != nil {
		return st, fmt.Errorf("read %s: %w", path, err)
	}
	return st, nil
}

// segmentFile is raft-wal's name for a segment (segment/filer.go there).
func segmentFile(walDir string, s types.SegmentInfo) string {
	return filepath.Join(walDir, fmt.Sprintf("%020d-%016x.wal", s.BaseIndex, s.ID))
}

// checkSegments finds segment files that are missing or shorter than
// they were made. Every segment is created at its full size limit
// (prealloc.go) and never shrinks, so a short file was cut by something else;
// raft-wal itself would read a cut tail as a torn write and silently
// start with fewer entries. It returns the segments raft-wal's metadata
// lists and the problems found; err is ErrInUse or an I/O error.
func checkSegments(w *where) ([]types.SegmentInfo, []*DamageError, error) {
	walDir := w.path(walDirName)
	st, err := walState(walDir)
	if errors.Is(err, ErrInUse) {
		return nil, nil, err
	}
	if err != nil {
		return nil, []*DamageError{w.damage(ReasonUnreadable, filepath.Join(walDir, walMetaName), 0, "raft-wal metadata unreadable: %v", err)}, nil
	}
	var problems []*DamageError
	for _, s := range st.Segments {
		path := segmentFile(walDir, s)
		fi, err := os.Stat(path)
		if os.IsNotExist(err) {
			problems = append(problems, w.damage(ReasonSegment, path, s.BaseIndex, "log segment %d (entries from %d) is missing", s.ID, s.BaseIndex))
			continue
		}
		if err != nil {
			problems = append(problems, w.damage(ReasonUnreadable, path, s.BaseIndex, "log segment unreadable: %v", err))
			continue
		}
		if s.SizeLimit > 0 && fi.Size() < int64(s.SizeLimit) {
			problems = append(problems, w.damage(ReasonSegment, path, s.BaseIndex,
				"log segment %d is %d bytes, shorter than the %d it was created with: it was cut", s.ID, fi.Size(), s.SizeLimit))
		}
	}
	return st.Segments, problems, nil
}

// segmentFor names the segment file of segs that holds index; the WAL
// directory when none does.
func segmentFor(walDir string, segs []types.SegmentInfo, index uint64) string {
	var best types.SegmentInfo
	found := false
	for _, s := range segs {
		if s.BaseIndex <= index && (!found || s.BaseIndex >= best.BaseIndex) {
			best, found = s, true
		}
	}
	if !found {
		return walDir
	}
	return segmentFile(walDir, best)
}
