package backup

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/meta/metapb"
)

// shardPiece is an empty shard state at index.
func shardPiece(t *testing.T, index uint64) []byte {
	t.Helper()
	f := fsm.New(fsm.Options{})
	f.ApplyBatch([]*raft.Log{{Type: raft.LogNoop, Index: index}})
	var b bytes.Buffer
	if _, err := f.WriteBackup(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func metaPiece(t *testing.T, shards uint32) []byte {
	t.Helper()
	b, err := meta.EncodeSnapshot(&metapb.Snapshot{Version: meta.SnapshotVersion, AppliedIndex: 9,
		Queues:   []*metapb.Queue{{Name: "q"}},
		ShardMap: &metapb.ShardMap{Version: 1, Count: shards}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// put sends one piece in chunks of n bytes, as a stream would.
func put(t *testing.T, w *Writer, group string, index uint64, data []byte, n int) error {
	t.Helper()
	for rest := data; len(rest) > 0; {
		k := min(n, len(rest))
		if err := w.Write(group, rest[:k]); err != nil {
			return err
		}
		rest = rest[k:]
	}
	sum := sha256.Sum256(data)
	return w.End(group, index, 3, uint64(len(data)), sum[:])
}

// writeBackup writes a complete two-shard backup into dir.
func writeBackup(t *testing.T, dir string) {
	t.Helper()
	w, err := Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Begin(2, "c1", "n1"); err != nil {
		t.Fatal(err)
	}
	for i, g := range []string{"shard-0", "shard-1"} {
		if err := put(t, w, g, uint64(10+i), shardPiece(t, uint64(10+i)), 7); err != nil {
			t.Fatal(err)
		}
	}
	if err := put(t, w, MetaGroup, 9, metaPiece(t, 2), 1000); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
}

func TestWriteThenVerify(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "b")
	writeBackup(t, dir)
	m, sums, err := Verify(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.ShardCount != 2 || m.ClusterID != "c1" || len(sums) != 3 || sums[2].Queues != 1 || sums[1].Index != 11 {
		t.Fatalf("manifest %+v, summaries %+v", m, sums)
	}
	src, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if src.ShardCount() != 2 || src.ShardSeed(1).Index != 11 || src.ShardSeed(1).Term != 3 || src.ShardSeed(2) != nil {
		t.Fatalf("source: %+v", src.Manifest)
	}
	// Nothing is left beside the backup.
	ents, _ := os.ReadDir(filepath.Dir(dir))
	if len(ents) != 1 {
		t.Fatalf("parent holds %d entries, want only the backup", len(ents))
	}
}

func TestCreateRefusesANonEmptyDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Create(dir); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("Create into a non-empty dir: %v", err)
	}
	// An empty one is fine: the backup replaces it.
	empty := filepath.Join(t.TempDir(), "e")
	if err := os.Mkdir(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	writeBackup(t, empty)
	if _, _, err := Verify(empty); err != nil {
		t.Fatal(err)
	}
}

func TestWriterRefusesADamagedOrIncompleteStream(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "b")
	w, err := Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write("shard-0", []byte("x")); err == nil {
		t.Error("a piece before the header was taken")
	}
	if err := w.Begin(2, "c1", "n1"); err != nil {
		t.Fatal(err)
	}
	if err := w.Write("shard-1", []byte("x")); err == nil || !strings.Contains(err.Error(), "out of order") {
		t.Errorf("shard-1 first: %v", err)
	}
	if err := w.Write("shard-0", []byte("abc")); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("abd"))
	if err := w.End("shard-0", 1, 1, 3, sum[:]); err == nil || !strings.Contains(err.Error(), "piece shard-0 arrived damaged") {
		t.Errorf("a piece with another checksum: %v", err)
	}
	if err := w.Commit(); err == nil || !strings.Contains(err.Error(), "incomplete") {
		t.Errorf("commit of an incomplete backup: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an incomplete backup reached %s: %v", dir, err)
	}
	w.Abort()
	if _, err := os.Stat(w.TempDir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Abort left %s", w.TempDir())
	}
}

func TestVerifyNamesTheDamagedPiece(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "b")
	writeBackup(t, dir)
	path := filepath.Join(dir, "shard-1.piece")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x40
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err = Verify(dir)
	var pe *PieceError
	if !errors.As(err, &pe) || pe.Group != "shard-1" || !strings.Contains(err.Error(), "checksum mismatch") {
		t.Fatalf("Verify of a flipped bit in shard-1: %v", err)
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "shard-1") {
		t.Fatalf("Open of a damaged backup: %v", err)
	}
}

func TestVerifyRefusesABadManifest(t *testing.T) {
	for name, edit := range map[string]func(string) string{
		"missing piece": func(s string) string { return strings.Replace(s, `"group": "shard-1"`, `"group": "shard-9"`, 1) },
		"other format":  func(s string) string { return strings.Replace(s, `"format": 1`, `"format": 7`, 1) },
		"not json":      func(s string) string { return s[:len(s)/2] },
	} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "b")
			writeBackup(t, dir)
			p := filepath.Join(dir, ManifestFile)
			b, _ := os.ReadFile(p)
			if err := os.WriteFile(p, []byte(edit(string(b))), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, _, err := Verify(dir); err == nil {
				t.Fatal("verified")
			}
		})
	}
	if _, _, err := Verify(t.TempDir()); err == nil || !strings.Contains(err.Error(), "not a backup") {
		t.Fatalf("Verify of an empty dir: %v", err)
	}
}

// A meta piece whose map disagrees with the manifest's shard count is
// refused: a restore would place another number of shards.
func TestVerifyRefusesAShardCountMismatch(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "b")
	w, err := Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Begin(1, "c1", "n1"); err != nil {
		t.Fatal(err)
	}
	if err := put(t, w, "shard-0", 10, shardPiece(t, 10), 100); err != nil {
		t.Fatal(err)
	}
	if err := put(t, w, MetaGroup, 9, metaPiece(t, 2), 100); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	var pe *PieceError
	if _, _, err := Verify(dir); !errors.As(err, &pe) || pe.Group != MetaGroup || !strings.Contains(err.Error(), "2 shards") {
		t.Fatalf("Verify: %v", err)
	}
}
