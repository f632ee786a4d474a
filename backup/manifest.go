// Package backup is the on-disk form of a cluster backup (raftq backup
// create): one file per raft group's piece and a manifest.json that names
// them with their raft index, term, size and sha256. It writes a backup
// directory atomically, verifies one (checksums and a full decode of every
// piece), and opens one for raftq-node --restore. docs/backup.md,
// "Back up" and "Restore".
package backup

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// FormatVersion is the manifest format this build writes and reads.
const FormatVersion = 1

// ManifestFile is the manifest's name inside a backup directory.
const ManifestFile = "manifest.json"

// MetaGroup is the meta group's piece name.
const MetaGroup = "meta"

// Manifest describes a backup. Pieces are listed in the order they were
// taken: shard-0 .. shard-N-1, then meta.
type Manifest struct {
	Format     int       `json:"format"`
	CreatedAt  time.Time `json:"created_at"`
	ClusterID  string    `json:"cluster_id"`
	ShardCount uint32    `json:"shard_count"`
	GatheredBy string    `json:"gathered_by"` // the node that gathered the pieces
	Pieces     []Piece   `json:"pieces"`
}

// Piece is one raft group's state at a committed index.
type Piece struct {
	Group  string `json:"group"` // "shard-N" or "meta"
	File   string `json:"file"`
	Index  uint64 `json:"index"` // raft index the state belongs to
	Term   uint64 `json:"term"`  // at least the term of every entry in it
	Bytes  uint64 `json:"bytes"`
	SHA256 string `json:"sha256"` // hex
}

// ShardGroup is shard id's piece name, as its raft group is named.
func ShardGroup(id uint32) string { return "shard-" + strconv.FormatUint(uint64(id), 10) }

// pieceFile is where a group's piece is stored in the directory.
func pieceFile(group string) string { return group + ".piece" }

// groups is the order pieces must come in for a cluster of n shards.
func groups(n uint32) []string {
	out := make([]string, 0, n+1)
	for id := uint32(0); id < n; id++ {
		out = append(out, ShardGroup(id))
	}
	return append(out, MetaGroup)
}

// check refuses a manifest that does not list exactly the pieces of its
// shard count, in order, with their files.
func (m *Manifest) check() error {
	if m.Format != FormatVersion {
		return fmt.Errorf("manifest format %d; this build reads %d", m.Format, FormatVersion)
	}
	if m.ShardCount == 0 {
		return errors.New("manifest: shard_count is 0")
	}
	want := groups(m.ShardCount)
	if len(m.Pieces) != len(want) {
		return fmt.Errorf("manifest lists %d pieces; a cluster of %d shards has %d (shard-0..shard-%d, meta)", len(m.Pieces), m.ShardCount, len(want), m.ShardCount-1)
	}
	for i, p := range m.Pieces {
		if p.Group != want[i] {
			return fmt.Errorf("manifest piece %d is %q, want %q", i, p.Group, want[i])
		}
		if p.File != pieceFile(p.Group) {
			return fmt.Errorf("manifest piece %s: file %q, want %q", p.Group, p.File, pieceFile(p.Group))
		}
		if p.Index == 0 || p.Term == 0 {
			return fmt.Errorf("manifest piece %s: index %d term %d (both must be above 0)", p.Group, p.Index, p.Term)
		}
	}
	return nil
}

// Piece returns the manifest's piece of group.
func (m *Manifest) Piece(group string) (Piece, bool) {
	for _, p := range m.Pieces {
		if p.Group == group {
			return p, true
		}
	}
	return Piece{}, false
}

// ReadManifest reads and checks dir's manifest.
func ReadManifest(dir string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s is not a backup: no %s (an interrupted backup leaves none)", dir, ManifestFile)
		}
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", filepath.Join(dir, ManifestFile), err)
	}
	if err := m.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, ManifestFile), err)
	}
	return &m, nil
}
