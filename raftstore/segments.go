package raftstore

import (
	"encoding/json"
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
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: boltOpenLimit})
	if err != nil {
		return st, fmt.Errorf("open %s: %w", path, err)
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
// raft-wal made them. raft-wal preallocates every segment to its size
// limit and never shrinks one, so a short file was cut by something else;
// raft-wal itself would read a cut tail as a torn write and silently
// start with fewer entries.
func checkSegments(dir, group string) ([]types.SegmentInfo, error) {
	walDir := filepath.Join(dir, walDirName)
	st, err := walState(walDir)
	if err != nil {
		return nil, damage(dir, group, ReasonUnreadable, filepath.Join(walDir, walMetaName), 0, "raft-wal metadata unreadable: %v", err)
	}
	for _, s := range st.Segments {
		path := segmentFile(walDir, s)
		fi, err := os.Stat(path)
		if os.IsNotExist(err) {
			return nil, damage(dir, group, ReasonSegment, path, s.BaseIndex, "log segment %d (entries from %d) is missing", s.ID, s.BaseIndex)
		}
		if err != nil {
			return nil, damage(dir, group, ReasonUnreadable, path, s.BaseIndex, "log segment unreadable: %v", err)
		}
		if s.SizeLimit > 0 && fi.Size() < int64(s.SizeLimit) {
			return nil, damage(dir, group, ReasonSegment, path, s.BaseIndex,
				"log segment %d is %d bytes, shorter than the %d it was created with: it was cut", s.ID, fi.Size(), s.SizeLimit)
		}
	}
	return st.Segments, nil
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
