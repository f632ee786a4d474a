package backup

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/meta/metapb"
)

// PieceSummary is what Verify found in one piece.
type PieceSummary struct {
	Piece
	Queues, Messages, Dedup uint64
}

// PieceError names the piece that failed verification.
type PieceError struct {
	Group, File string
	Err         error
}

func (e *PieceError) Error() string {
	return fmt.Sprintf("piece %s (%s): %v", e.Group, e.File, e.Err)
}

func (e *PieceError) Unwrap() error { return e.Err }

// Verify checks a backup directory: the manifest lists every piece of its
// shard count in order; each piece file has the manifest's size and
// sha256; each decodes whole, a shard's as an FSM snapshot at the
// manifest's index, meta's as a meta snapshot with a shard map of the
// manifest's shard count. The first failure is a *PieceError naming the
// piece, or an error about the manifest.
func Verify(dir string) (*Manifest, []PieceSummary, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, nil, err
	}
	out := make([]PieceSummary, 0, len(m.Pieces))
	for _, p := range m.Pieces {
		s, err := verifyPiece(dir, m, p)
		if err != nil {
			return m, out, &PieceError{Group: p.Group, File: filepath.Join(dir, p.File), Err: err}
		}
		out = append(out, s)
	}
	return m, out, nil
}

func verifyPiece(dir string, m *Manifest, p Piece) (PieceSummary, error) {
	s := PieceSummary{Piece: p}
	f, err := os.Open(filepath.Join(dir, p.File))
	if err != nil {
		return s, err
	}
	defer f.Close()
	h := sha256.New()
	r := bufio.NewReaderSize(io.TeeReader(f, h), 64<<10)
	var decodeErr error
	if p.Group == MetaGroup {
		var snap *metapb.Snapshot
		if snap, decodeErr = meta.DecodeSnapshot(r); decodeErr == nil {
			s.Queues = uint64(len(snap.GetQueues()))
			if n := snap.GetShardMap().GetCount(); n != m.ShardCount {
				decodeErr = fmt.Errorf("its shard map has %d shards, the manifest %d", n, m.ShardCount)
			}
		}
	} else {
		var sum fsm.SnapshotSummary
		if sum, decodeErr = fsm.CheckSnapshot(r); decodeErr == nil {
			s.Queues, s.Messages, s.Dedup = sum.Queues, sum.Messages, sum.Dedup
			if sum.AppliedIndex != p.Index {
				decodeErr = fmt.Errorf("state at index %d, the manifest says %d", sum.AppliedIndex, p.Index)
			}
		}
	}
	// Hash what the decoder left too: bytes after the end are damage.
	rest, err := io.Copy(io.Discard, r)
	if err != nil {
		return s, fmt.Errorf("read: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		return s, err
	}
	if got := hex.EncodeToString(h.Sum(nil)); uint64(st.Size()) != p.Bytes || got != p.SHA256 {
		return s, fmt.Errorf("checksum mismatch: %d bytes sha256 %s, the manifest says %d bytes sha256 %s", st.Size(), got, p.Bytes, p.SHA256)
	}
	if decodeErr != nil {
		return s, fmt.Errorf("does not decode: %w", decodeErr)
	}
	if rest > 0 {
		return s, fmt.Errorf("%d bytes after the end of the state", rest)
	}
	return s, nil
}
