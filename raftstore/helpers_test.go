package raftstore

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
)

// Shared by the tests of Open (replica_test.go) and Verify (verify_test.go):
// a replica written the way raft writes it, and the ways its files are
// harmed.

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// segBytes keeps segments small so a test spans several.
const segBytes = 64 << 10

type fixture struct {
	t       *testing.T
	root    string
	dir     string
	node    *Node
	kind    string
	damaged atomic.Pointer[DamageError]
}

func newFixture(t *testing.T, kind string) *fixture {
	t.Helper()
	root := t.TempDir()
	n, err := OpenNode(root, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Create("n1"); err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, root: root, dir: filepath.Join(root, "shards", "0"), node: n, kind: kind}
}

func (f *fixture) options() Options {
	return Options{Dir: f.dir, NodeID: "n1", Group: "shard-0", Node: f.node, LogStore: f.kind,
		WALSegmentBytes: segBytes, Logger: quiet(),
		Damaged: func(d *DamageError) { f.damaged.Store(d) }}
}

func (f *fixture) open() (*Replica, error) {
	r, err := Open(f.options())
	if err != nil {
		return nil, err
	}
	if err := r.CheckCovered(0); err != nil {
		_ = r.Close()
		return nil, err
	}
	return r, nil
}

func (f *fixture) mustOpen() *Replica {
	f.t.Helper()
	r, err := f.open()
	if err != nil {
		f.t.Fatalf("open: %v", err)
	}
	return r
}

// body is a recognisable payload for entry i, so tests can find it on disk.
func body(i uint64) []byte { return fmt.Appendf(nil, "payload-%06d-%s", i, strings.Repeat("x", 200)) }

// write creates (or reopens) the replica and appends entries from..to as
// a leader would propose them, then records term and closes it.
func (f *fixture) write(from, to, term uint64) {
	f.t.Helper()
	r := f.mustOpen()
	if err := r.MarkReady(); err != nil {
		f.t.Fatal(err)
	}
	for i := from; i <= to; i++ {
		l := Command(body(i))
		l.Index, l.Term = i, term
		if err := r.Logs().StoreLogs([]*raft.Log{&l}); err != nil {
			f.t.Fatalf("store %d: %v", i, err)
		}
	}
	if err := r.Stable().SetUint64(keyCurrentTerm, term); err != nil {
		f.t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		f.t.Fatal(err)
	}
}

func wantDamage(t *testing.T, err error, reason string) *DamageError {
	t.Helper()
	d, ok := IsDamage(err)
	if !ok {
		t.Fatalf("err = %v, want damage %q", err, reason)
	}
	if d.Reason != reason {
		t.Fatalf("damage reason %q (%v), want %q", d.Reason, d, reason)
	}
	if !strings.Contains(d.Error(), "will not vote or serve") || !strings.Contains(d.Error(), "raftq cluster repair") {
		t.Fatalf("damage message does not say what happens and what to do: %v", d)
	}
	return d
}

// --- harm ---

func rm(t *testing.T, dir, name string) {
	t.Helper()
	if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

func segments(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, walDirName, "*.wal"))
	if err != nil || len(m) < 2 {
		t.Fatalf("want at least two segments, got %v (%v)", m, err)
	}
	return m // sorted: names start with the zero-padded base index
}

func newestSegment(t *testing.T, dir string) string { s := segments(t, dir); return s[len(s)-1] }
func oldestSegment(t *testing.T, dir string) string { return segments(t, dir)[0] }

func cut(t *testing.T, path string, n int64) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, fi.Size()-n); err != nil {
		t.Fatal(err)
	}
}

// flipIn changes one byte inside the first copy of needle in the file.
func flipIn(t *testing.T, path string, needle []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, needle)
	if i < 0 {
		t.Fatalf("%q not found in %s", needle[:16], path)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte{b[i+10] ^ 0x20}, int64(i+10)); err != nil {
		t.Fatal(err)
	}
}

func setTerm(t *testing.T, dir string, term uint64) {
	t.Helper()
	b, err := raftboltdb.NewBoltStore(filepath.Join(dir, boltFileName))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.SetUint64(keyCurrentTerm, term); err != nil {
		t.Fatal(err)
	}
}

// dropTail removes entries after keep with the raw WAL, as a disk that
// lost them would, without telling the facts.
func dropTail(t *testing.T, dir string, keep uint64) {
	t.Helper()
	w, err := wal.Open(filepath.Join(dir, walDirName), wal.WithSegmentSize(segBytes))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	last, _ := w.LastIndex()
	if err := w.DeleteRange(keep+1, last); err != nil {
		t.Fatal(err)
	}
}

func editIdentity(t *testing.T, dir string, edit func(*ReplicaIdentity)) {
	t.Helper()
	id, err := readIdentity(dir)
	if err != nil {
		t.Fatal(err)
	}
	edit(id)
	if err := writeIdentity(dir, id); err != nil {
		t.Fatal(err)
	}
}
