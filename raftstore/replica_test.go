package raftstore

import (
	"bytes"
	"errors"
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

func TestReplicaSurvivesReopenWithEveryEntryChecked(t *testing.T) {
	for _, kind := range []string{LogStoreWAL, LogStoreBolt} {
		t.Run(kind, func(t *testing.T) {
			f := newFixture(t, kind)
			f.write(1, 300, 2)
			f.write(301, 400, 3)
			r := f.mustOpen()
			defer r.Close()
			if r.Fresh() || r.MayBootstrap() {
				t.Fatalf("reopened replica fresh=%v mayBootstrap=%v", r.Fresh(), r.MayBootstrap())
			}
			if got := r.Facts(); got.Index != 400 || got.Term != 3 {
				t.Fatalf("facts %+v, want index 400 term 3", got)
			}
			var l raft.Log
			for i := uint64(1); i <= 400; i++ {
				if err := r.Logs().GetLog(i, &l); err != nil {
					t.Fatalf("entry %d: %v", i, err)
				}
				if !bytes.Equal(l.Data, body(i)) || len(l.Extensions) != blockSize || l.Extensions[0] != tagE2E {
					t.Fatalf("entry %d read back as %q ext %x", i, l.Data[:16], l.Extensions)
				}
			}
			if id := r.Identity(); id.LogStore != kind || id.State != stateReady || id.Group != "shard-0" {
				t.Fatalf("identity %+v", id)
			}
			if e, ok := f.node.group("shard-0"); !ok || e.State != GroupReady || e.Incarnation != r.Identity().Incarnation {
				t.Fatalf("node registry %+v %v", e, ok)
			}
		})
	}
}

// A replica keeps the log store it was created with, whatever it is asked
// for later: switching would start an empty log beside the real one.
func TestReplicaKeepsItsLogStore(t *testing.T) {
	f := newFixture(t, LogStoreBolt)
	f.write(1, 10, 1)
	f.kind = LogStoreWAL
	r := f.mustOpen()
	defer r.Close()
	if r.Identity().LogStore != LogStoreBolt {
		t.Fatalf("reopened as %q", r.Identity().LogStore)
	}
	if last, _ := r.Logs().LastIndex(); last != 10 {
		t.Fatalf("last index %d", last)
	}
	if _, err := os.Stat(filepath.Join(f.dir, walDirName)); !os.IsNotExist(err) {
		t.Fatalf("a wal/ appeared beside the bolt log: %v", err)
	}
}

func TestReplicaRejectsUnknownLogStore(t *testing.T) {
	f := newFixture(t, "rocksdb")
	if _, err := f.open(); err == nil || !strings.Contains(err.Error(), `log store "rocksdb"`) {
		t.Fatalf("unknown store: %v", err)
	}
	if _, err := os.Stat(f.dir); !os.IsNotExist(err) {
		t.Fatalf("refused open left %s: %v", f.dir, err)
	}
}

// Each way a replica can lose what it had is refused at open, with the
// reason and what to do.
func TestReplicaRefusesWhatLostState(t *testing.T) {
	cases := []struct {
		name   string
		kind   string
		harm   func(t *testing.T, f *fixture)
		reason string
	}{
		{"stable store deleted", LogStoreWAL, func(t *testing.T, f *fixture) { rm(t, f.dir, boltFileName) }, ReasonStoreMissing},
		{"wal deleted", LogStoreWAL, func(t *testing.T, f *fixture) { rm(t, f.dir, walDirName) }, ReasonStoreMissing},
		{"facts deleted", LogStoreWAL, func(t *testing.T, f *fixture) { rm(t, f.dir, factsFileName) }, ReasonStoreMissing},
		{"bolt log deleted", LogStoreBolt, func(t *testing.T, f *fixture) { rm(t, f.dir, boltFileName) }, ReasonStoreMissing},
		{"identity deleted", LogStoreWAL, func(t *testing.T, f *fixture) { rm(t, f.dir, identityFileName) }, ReasonGroupMissing},
		{"group directory deleted", LogStoreWAL, func(t *testing.T, f *fixture) { rm(t, f.dir, "") }, ReasonGroupMissing},
		{"newest segment cut by 8 KiB", LogStoreWAL, func(t *testing.T, f *fixture) { cut(t, newestSegment(t, f.dir), 8<<10) }, ReasonSegment},
		{"oldest segment cut by 8 KiB", LogStoreWAL, func(t *testing.T, f *fixture) { cut(t, oldestSegment(t, f.dir), 8<<10) }, ReasonSegment},
		{"a body byte changed in the newest segment", LogStoreWAL, func(t *testing.T, f *fixture) { flipIn(t, newestSegment(t, f.dir), body(290)) }, ReasonChecksum},
		{"a body byte changed in a sealed segment", LogStoreWAL, func(t *testing.T, f *fixture) { flipIn(t, oldestSegment(t, f.dir), body(3)) }, ReasonChecksum},
		{"a body byte changed in the bolt log", LogStoreBolt, func(t *testing.T, f *fixture) { flipIn(t, filepath.Join(f.dir, boltFileName), body(150)) }, ReasonChecksum},
		{"term rolled back", LogStoreWAL, func(t *testing.T, f *fixture) { setTerm(t, f.dir, 1) }, ReasonTermLost},
		{"log tail lost", LogStoreWAL, func(t *testing.T, f *fixture) { dropTail(t, f.dir, 250) }, ReasonLogShort},
		{"another node's directory", LogStoreWAL, func(t *testing.T, f *fixture) { editIdentity(t, f.dir, func(id *ReplicaIdentity) { id.NodeID = "n2" }) }, ReasonForeign},
		{"an old incarnation restored", LogStoreWAL, func(t *testing.T, f *fixture) {
			editIdentity(t, f.dir, func(id *ReplicaIdentity) { id.Incarnation = "0123456789abcdef" })
		}, ReasonForeign},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.kind)
			f.write(1, 300, 4)
			tc.harm(t, f)
			_, err := f.open()
			wantDamage(t, err, tc.reason)
		})
	}
}

// Raft state in a directory with no identity was written by a raftq
// without identity files (or the node lost node.json): refused.
func TestReplicaRefusesStateWithoutIdentity(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "shards", "0")
	st, err := openStores(dir, LogStoreWAL, 0, quiet())
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	n, err := OpenNode(root, "n1")
	if err == nil {
		t.Fatalf("a node directory with raft state and no node.json opened (fresh=%v)", n.Fresh())
	}
	wantDamage(t, err, ReasonLegacy)
	// With a node identity but none for the replica.
	root2 := t.TempDir()
	n2, err := OpenNode(root2, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if err := n2.Create("n1"); err != nil {
		t.Fatal(err)
	}
	dir2 := filepath.Join(root2, "shards", "0")
	st, err = openStores(dir2, LogStoreWAL, 0, quiet())
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	_, err = Open(Options{Dir: dir2, NodeID: "n1", Group: "shard-0", Node: n2, Logger: quiet()})
	wantDamage(t, err, ReasonNoIdentity)
}

// Truncating the tail through the store (raft replacing a conflicting
// suffix) lowers the facts first, so the replica reopens.
func TestReplicaTailDeletionLowersFacts(t *testing.T) {
	f := newFixture(t, LogStoreWAL)
	f.write(1, 300, 2)
	r := f.mustOpen()
	if err := r.Logs().DeleteRange(201, 300); err != nil {
		t.Fatal(err)
	}
	if got := r.Facts().Index; got != 200 {
		t.Fatalf("facts index %d after deleting 201-300, want 200", got)
	}
	// A head compaction leaves the facts alone.
	if err := r.Logs().DeleteRange(1, 50); err != nil {
		t.Fatal(err)
	}
	if got := r.Facts().Index; got != 200 {
		t.Fatalf("facts index %d after compacting the head, want 200", got)
	}
	_ = r.Close()
	r, err := Open(f.options())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// The head is gone, so a snapshot must cover it.
	wantDamage(t, r.CheckCovered(0), ReasonSnapshotGone)
	if err := r.CheckCovered(50); err != nil {
		t.Fatalf("with a snapshot at 50: %v", err)
	}
}

// A replica that finds damaged bytes while running records it, tells its
// owner, and stays closed across restarts.
func TestReplicaDamageFoundAtRunTimeIsRecorded(t *testing.T) {
	f := newFixture(t, LogStoreWAL)
	f.write(1, 300, 2)
	r := f.mustOpen()
	// Damage the bytes under the open store; raft-wal reads them back.
	flipIn(t, oldestSegment(t, f.dir), body(5))
	var l raft.Log
	err := r.Logs().GetLog(5, &l)
	d := wantDamage(t, err, ReasonChecksum)
	if d.Index != 5 || !strings.HasSuffix(d.File, ".wal") {
		t.Fatalf("damage names %s index %d", d.File, d.Index)
	}
	if got := f.damaged.Load(); got == nil || got.Index != 5 {
		t.Fatalf("owner told %+v", got)
	}
	_ = r.Close()
	_, err = f.open()
	if d := wantDamage(t, err, ReasonChecksum); d.Index != 5 {
		t.Fatalf("after restart: %v", d)
	}
}

// A command whose bytes do not match the leader's checksum is never stored.
func TestReplicaRefusesToStoreADamagedCommand(t *testing.T) {
	f := newFixture(t, LogStoreWAL)
	r := f.mustOpen()
	defer r.Close()
	_ = r.MarkReady()
	good := Command([]byte("hello"))
	good.Index, good.Term = 1, 1
	bad := Command([]byte("hello"))
	bad.Index, bad.Term = 2, 1
	bad.Data = []byte("hellp")
	err := r.Logs().StoreLogs([]*raft.Log{&good, &bad})
	if !errors.Is(err, ErrChecksum) {
		t.Fatalf("store of a damaged command: %v", err)
	}
	if last, _ := r.Logs().LastIndex(); last != 0 {
		t.Fatalf("part of a refused batch was stored: last index %d", last)
	}
	noExt := raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: []byte("x")}
	if err := r.Logs().StoreLogs([]*raft.Log{&noExt}); !errors.Is(err, ErrChecksum) {
		t.Fatalf("store of a command without a checksum: %v", err)
	}
	cfg := raft.Log{Index: 1, Term: 1, Type: raft.LogConfiguration, Data: []byte("cfg")}
	if err := r.Logs().StoreLogs([]*raft.Log{&cfg}); err != nil {
		t.Fatalf("raft's own entry: %v", err)
	}
	if len(cfg.Extensions) != 0 {
		t.Fatalf("the caller's entry was changed: %x", cfg.Extensions)
	}
}

// An interrupted creation (raft never ran) starts again instead of being
// refused; a fresh replica of a group the node never had may bootstrap,
// one re-created for repair may not.
func TestReplicaCreation(t *testing.T) {
	f := newFixture(t, LogStoreWAL)
	r := f.mustOpen()
	if !r.Fresh() || !r.MayBootstrap() {
		t.Fatalf("new replica fresh=%v mayBootstrap=%v", r.Fresh(), r.MayBootstrap())
	}
	first := r.Identity().Incarnation
	_ = r.Close() // not MarkReady: creation interrupted
	r = f.mustOpen()
	if !r.Fresh() || r.Identity().Incarnation == first {
		t.Fatalf("interrupted creation not restarted: fresh=%v inc %s", r.Fresh(), r.Identity().Incarnation)
	}
	if err := r.MarkReady(); err != nil {
		t.Fatal(err)
	}
	_ = r.Close()
	// Repair: the node moves the directory aside and marks the group for
	// rejoining.
	if err := f.node.setGroup("shard-0", GroupEntry{State: GroupRejoin, Incarnation: "feedfacefeedface"}); err != nil {
		t.Fatal(err)
	}
	rm(t, f.dir, "")
	r = f.mustOpen()
	defer r.Close()
	if !r.Fresh() || r.MayBootstrap() || r.Identity().Incarnation != "feedfacefeedface" {
		t.Fatalf("rejoining replica fresh=%v mayBootstrap=%v inc %s", r.Fresh(), r.MayBootstrap(), r.Identity().Incarnation)
	}
}

func TestDamageRecordKeepsReplicaClosed(t *testing.T) {
	f := newFixture(t, LogStoreWAL)
	f.write(1, 10, 1)
	d := damage(f.dir, "shard-0", ReasonDiverged, "", 7, "state digest differs from the leader's at index 7")
	if err := MarkDamaged(d); err != nil {
		t.Fatal(err)
	}
	_, err := f.open()
	if got := wantDamage(t, err, ReasonDiverged); got.Index != 7 {
		t.Fatalf("recorded damage: %+v", got)
	}
}

func TestNodeIdentity(t *testing.T) {
	root := t.TempDir()
	n, err := OpenNode(root, "n1")
	if err != nil || !n.Fresh() {
		t.Fatalf("fresh dir: %v fresh=%v", err, n.Fresh())
	}
	if err := n.Create("n1"); err != nil {
		t.Fatal(err)
	}
	if err := n.SetClusterID("c1"); err != nil {
		t.Fatal(err)
	}
	n, err = OpenNode(root, "n1")
	if err != nil || n.Fresh() || n.Identity().ClusterID != "c1" {
		t.Fatalf("reopen: %v %+v", err, n.Identity())
	}
	wantDamage(t, n.SetClusterID("c2"), ReasonForeign)
	_, err = OpenNode(root, "n2")
	wantDamage(t, err, ReasonForeign)
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
