package backup

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/meta/metapb"
	"github.com/raftq/raftq/raftgroup"
)

// Source is a verified backup a new cluster is built from
// (raftq-node --restore).
type Source struct {
	Dir      string
	Manifest *Manifest
	// Meta is the meta piece: the queues, and the old cluster's shard
	// map, of which only the shard count is used.
	Meta *metapb.Snapshot
}

// Open verifies dir (Verify) and reads its meta piece.
func Open(dir string) (*Source, error) {
	m, _, err := Verify(dir)
	if err != nil {
		return nil, fmt.Errorf("backup %s: %w", dir, err)
	}
	p, _ := m.Piece(MetaGroup)
	f, err := os.Open(filepath.Join(dir, p.File))
	if err != nil {
		return nil, fmt.Errorf("backup %s: %w", dir, err)
	}
	defer f.Close()
	snap, err := meta.DecodeSnapshot(f)
	if err != nil {
		return nil, &PieceError{Group: p.Group, File: f.Name(), Err: err}
	}
	return &Source{Dir: dir, Manifest: m, Meta: snap}, nil
}

// ShardCount is the backed-up cluster's shard count, which a restored
// cluster must have: message ids name their shard and the queue/group
// hash picks it.
func (s *Source) ShardCount() uint32 { return s.Manifest.ShardCount }

// ShardSeed is the state shard id's raft group starts from: its piece at
// the piece's index and term (raftgroup.Seed). nil for a shard the backup
// does not have.
func (s *Source) ShardSeed(id uint32) *raftgroup.Seed {
	p, ok := s.Manifest.Piece(ShardGroup(id))
	if !ok {
		return nil
	}
	path := filepath.Join(s.Dir, p.File)
	return &raftgroup.Seed{Index: p.Index, Term: p.Term, Open: func() (io.ReadCloser, error) { return os.Open(path) }}
}
