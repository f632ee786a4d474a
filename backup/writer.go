package backup

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"os"
	"path/filepath"
	"time"
)

// Writer builds a backup directory from a stream of pieces. Everything is
// written into a temporary directory beside the target and renamed onto
// it only by Commit, once every piece arrived whole and matched the
// checksum its sender computed: a backup directory with a manifest is
// always complete. Pieces are written as they arrive, so memory stays at
// one chunk whatever the size of the cluster.
type Writer struct {
	dir, tmp string
	m        Manifest
	f        *os.File
	group    string
	sum      hash.Hash
	size     uint64
	next     int // index in groups(m.ShardCount) of the piece expected next
	now      func() time.Time
}

// Create starts a backup into dir, which must not exist or be empty; its
// parent must exist.
func Create(dir string) (*Writer, error) {
	dir = filepath.Clean(dir)
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return nil, fmt.Errorf("%s is not empty: a backup goes into a new or empty directory", dir)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("backup directory: %w", err)
	}
	parent := filepath.Dir(dir)
	if st, err := os.Stat(parent); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("parent directory %s does not exist", parent)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".partial-")
	if err != nil {
		return nil, fmt.Errorf("backup: temporary directory: %w", err)
	}
	return &Writer{dir: dir, tmp: tmp, now: time.Now}, nil
}

// TempDir is where the backup is written until Commit.
func (w *Writer) TempDir() string { return w.tmp }

// Begin records what the backup is of; it comes before any piece.
func (w *Writer) Begin(shardCount uint32, clusterID, gatheredBy string) error {
	if shardCount == 0 {
		return errors.New("backup stream: shard count 0")
	}
	if w.m.ShardCount != 0 {
		return errors.New("backup stream: a second header")
	}
	w.m = Manifest{Format: FormatVersion, ShardCount: shardCount, ClusterID: clusterID, GatheredBy: gatheredBy}
	return nil
}

// Write appends data to group's piece; pieces must come whole and in
// order (shard-0 .. shard-N-1, meta).
func (w *Writer) Write(group string, data []byte) error {
	if w.m.ShardCount == 0 {
		return errors.New("backup stream: a piece before the header")
	}
	if w.f == nil {
		want := groups(w.m.ShardCount)
		if w.next >= len(want) || group != want[w.next] {
			return fmt.Errorf("backup stream: piece %q out of order", group)
		}
		f, err := os.OpenFile(filepath.Join(w.tmp, pieceFile(group)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return fmt.Errorf("backup: piece %s: %w", group, err)
		}
		w.f, w.group, w.sum, w.size = f, group, sha256.New(), 0
	} else if group != w.group {
		return fmt.Errorf("backup stream: piece %q began before %q ended", group, w.group)
	}
	if _, err := w.f.Write(data); err != nil {
		return fmt.Errorf("backup: piece %s: %w", group, err)
	}
	w.sum.Write(data)
	w.size += uint64(len(data))
	return nil
}

// End closes group's piece. size and sum are what the sender computed;
// a piece that arrived different is refused.
func (w *Writer) End(group string, index, term, size uint64, sum []byte) error {
	if w.f == nil {
		// An empty piece still has a file.
		if err := w.Write(group, nil); err != nil {
			return err
		}
	}
	if group != w.group {
		return fmt.Errorf("backup stream: end of %q inside %q", group, w.group)
	}
	f := w.f
	w.f = nil
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("backup: piece %s: sync: %w", group, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("backup: piece %s: %w", group, err)
	}
	got := w.sum.Sum(nil)
	if w.size != size || !bytes.Equal(got, sum) {
		return fmt.Errorf("backup: piece %s arrived damaged: %d bytes sha256 %x, the sender sent %d bytes sha256 %x", group, w.size, got, size, sum)
	}
	w.m.Pieces = append(w.m.Pieces, Piece{Group: group, File: pieceFile(group), Index: index, Term: term, Bytes: size, SHA256: hex.EncodeToString(got)})
	w.next++
	return nil
}

// Commit writes the manifest and moves the backup into place. It fails,
// leaving the target untouched, unless every piece arrived.
func (w *Writer) Commit() error {
	if w.f != nil {
		return fmt.Errorf("backup stream ended inside piece %s", w.group)
	}
	w.m.CreatedAt = w.now().UTC()
	if err := w.m.check(); err != nil {
		return fmt.Errorf("backup incomplete: %w", err)
	}
	b, err := json.MarshalIndent(&w.m, "", "  ")
	if err != nil {
		return fmt.Errorf("backup: manifest: %w", err)
	}
	if err := writeSynced(filepath.Join(w.tmp, ManifestFile), append(b, '\n')); err != nil {
		return err
	}
	if err := syncDir(w.tmp); err != nil {
		return err
	}
	// An empty target goes first (os.Remove refuses a non-empty one, so
	// a directory filled meanwhile is never overwritten): os.Rename does
	// not replace directories.
	if err := os.Remove(w.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("backup: %s: %w", w.dir, err)
	}
	if err := os.Rename(w.tmp, w.dir); err != nil {
		return fmt.Errorf("backup: move into place: %w", err)
	}
	return syncDir(filepath.Dir(w.dir))
}

// Manifest is the manifest as far as the stream got.
func (w *Writer) Manifest() Manifest { return w.m }

// Abort removes the temporary directory.
func (w *Writer) Abort() {
	if w.f != nil {
		_ = w.f.Close()
		w.f = nil
	}
	_ = os.RemoveAll(w.tmp)
}

func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		return fmt.Errorf("backup: write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("backup: sync %s: %w", path, err)
	}
	return f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("backup: sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("backup: sync %s: %w", dir, err)
	}
	return nil
}
