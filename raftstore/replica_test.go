package raftstore

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

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
	st, err := openStores(dir, LogStoreWAL, 0, quiet(), nil)
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
	st, err = openStores(dir2, LogStoreWAL, 0, quiet(), nil)
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

// A replica whose files another open holds (a node still running, or a
// check) is busy, not damaged: the error says so and records nothing.
func TestReplicaHeldOpenIsNotDamage(t *testing.T) {
	for _, kind := range []string{LogStoreWAL, LogStoreBolt} {
		t.Run(kind, func(t *testing.T) {
			f := newFixture(t, kind)
			f.write(1, 10, 1)
			r := f.mustOpen()
			defer r.Close()
			_, err := f.open()
			if !errors.Is(err, ErrInUse) {
				t.Fatalf("second open: %v, want ErrInUse", err)
			}
			if d, ok := IsDamage(err); ok {
				t.Fatalf("a busy replica was called damaged: %v", d)
			}
			if _, err := os.Stat(filepath.Join(f.dir, damageFileName)); !os.IsNotExist(err) {
				t.Fatalf("a busy replica got a damage record: %v", err)
			}
		})
	}
}
