package raftstore

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// fileState is what Verify must leave as it was: a file's bytes, size,
// mode and modification time; a directory's entries show through the set
// of paths and its modification time.
type fileState struct {
	mode  fs.FileMode
	size  int64
	mtime time.Time
	sum   [32]byte
}

func treeState(t *testing.T, root string) map[string]fileState {
	t.Helper()
	out := map[string]fileState{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st := fileState{mode: fi.Mode(), size: fi.Size(), mtime: fi.ModTime()}
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			st.sum = sha256.Sum256(b)
		}
		out[path] = st
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func assertUnchanged(t *testing.T, before, after map[string]fileState) {
	t.Helper()
	for path, b := range before {
		a, ok := after[path]
		switch {
		case !ok:
			t.Errorf("verify removed %s", path)
		case a != b:
			t.Errorf("verify changed %s: %+v -> %+v", path, b, a)
		}
	}
	for path := range after {
		if _, ok := before[path]; !ok {
			t.Errorf("verify created %s", path)
		}
	}
}

// verifyUnchanged runs Verify on root and fails if any file changed.
func verifyUnchanged(t *testing.T, root string) *Report {
	t.Helper()
	before := treeState(t, root)
	rep, err := Verify(root)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	assertUnchanged(t, before, treeState(t, root))
	return rep
}

func groupReport(t *testing.T, rep *Report, group string) *GroupReport {
	t.Helper()
	for _, g := range rep.Groups {
		if g.Group == group {
			return g
		}
	}
	t.Fatalf("no report for %s in %+v", group, rep.Groups)
	return nil
}

func wantIntact(t *testing.T, rep *Report) {
	t.Helper()
	if rep.Damaged() {
		for _, d := range rep.Node {
			t.Errorf("node: %v", d)
		}
		for _, g := range rep.Groups {
			for _, d := range g.Problems {
				t.Errorf("%s: %s: %v", g.Group, d.Reason, d)
			}
		}
		t.FailNow()
	}
}

// wantOnly asserts the group has exactly one problem, with reason, file
// and index, and returns it.
func wantOnly(t *testing.T, g *GroupReport, reason, file string, index uint64) *DamageError {
	t.Helper()
	if len(g.Problems) != 1 {
		for _, d := range g.Problems {
			t.Logf("problem: %s: %v", d.Reason, d)
		}
		t.Fatalf("%s: %d problems, want one (%s)", g.Group, len(g.Problems), reason)
	}
	d := g.Problems[0]
	if d.Reason != reason || d.File != file || d.Index != index {
		t.Fatalf("%s: found %s in %s at index %d (%s), want %s in %s at index %d",
			g.Group, d.Reason, d.File, d.Index, d.Detail, reason, file, index)
	}
	if d.Group != g.Group || d.Dir != g.Dir {
		t.Fatalf("problem names group %q dir %q, want %q %q", d.Group, d.Dir, g.Group, g.Dir)
	}
	return d
}

// Verify reports each way a replica can lose what it had with the reason,
// file and index a start would refuse it with, and changes no file doing so.
func TestVerifyReportsWhatOpenRefuses(t *testing.T) {
	cases := []struct {
		name   string
		kind   string
		harm   func(t *testing.T, f *fixture) (file string, index uint64)
		reason string
	}{
		{"stable store deleted", LogStoreWAL, func(t *testing.T, f *fixture) (string, uint64) {
			rm(t, f.dir, boltFileName)
			return filepath.Join(f.dir, boltFileName), 0
		}, ReasonStoreMissing},
		{"wal deleted", LogStoreWAL, func(t *testing.T, f *fixture) (string, uint64) {
			rm(t, f.dir, walDirName)
			return filepath.Join(f.dir, walDirName), 0
		}, ReasonStoreMissing},
		{"facts deleted", LogStoreWAL, func(t *testing.T, f *fixture) (string, uint64) {
			rm(t, f.dir, factsFileName)
			return filepath.Join(f.dir, factsFileName), 0
		}, ReasonStoreMissing},
		{"bolt log deleted", LogStoreBolt, func(t *testing.T, f *fixture) (string, uint64) {
			rm(t, f.dir, boltFileName)
			return filepath.Join(f.dir, boltFileName), 0
		}, ReasonStoreMissing},
		{"identity deleted", LogStoreWAL, func(t *testing.T, f *fixture) (string, uint64) {
			rm(t, f.dir, identityFileName)
			return f.dir, 0
		}, ReasonGroupMissing},
		{"newest segment cut by 8 KiB", LogStoreWAL, func(t *testing.T, f *fixture) (string, uint64) {
			seg := newestSegment(t, f.dir)
			cut(t, seg, 8<<10)
			return seg, segmentBase(t, seg)
		}, ReasonSegment},
		{"oldest segment cut by 8 KiB", LogStoreWAL, func(t *testing.T, f *fixture) (string, uint64) {
			seg := oldestSegment(t, f.dir)
			cut(t, seg, 8<<10)
			return seg, segmentBase(t, seg)
		}, ReasonSegment},
		{"a body byte changed in the newest segment", LogStoreWAL, func(t *testing.T, f *fixture) (string, uint64) {
			seg := newestSegment(t, f.dir)
			flipIn(t, seg, body(290))
			return seg, 290
		}, ReasonChecksum},
		{"a body byte changed in a sealed segment", LogStoreWAL, func(t *testing.T, f *fixture) (string, uint64) {
			seg := oldestSegment(t, f.dir)
			flipIn(t, seg, body(3))
			return seg, 3
		}, ReasonChecksum},
		// raft-wal reads a last commit that fails its CRC as a torn write
		// and drops it: the log is one entry short of the facts.
		{"a body byte changed in the last commit", LogStoreWAL, func(t *testing.T, f *fixture) (string, uint64) {
			seg := newestSegment(t, f.dir)
			flipIn(t, seg, body(300))
			return seg, 299
		}, ReasonLogShort},
		{"a body byte changed in the bolt log", LogStoreBolt, func(t *testing.T, f *fixture) (string, uint64) {
			flipIn(t, filepath.Join(f.dir, boltFileName), body(150))
			return filepath.Join(f.dir, boltFileName), 150
		}, ReasonChecksum},
		{"term rolled back", LogStoreWAL, func(t *testing.T, f *fixture) (string, uint64) {
			setTerm(t, f.dir, 1)
			return filepath.Join(f.dir, boltFileName), 0
		}, ReasonTermLost},
		{"term rolled back in the bolt store", LogStoreBolt, func(t *testing.T, f *fixture) (string, uint64) {
			setTerm(t, f.dir, 1)
			return filepath.Join(f.dir, boltFileName), 0
		}, ReasonTermLost},
		{"log tail lost", LogStoreWAL, func(t *testing.T, f *fixture) (string, uint64) {
			dropTail(t, f.dir, 250)
			return segmentHolding(t, f.dir, 250), 250
		}, ReasonLogShort},
		{"another node's directory", LogStoreWAL, func(t *testing.T, f *fixture) (string, uint64) {
			editIdentity(t, f.dir, func(id *ReplicaIdentity) { id.NodeID = "n2" })
			return filepath.Join(f.dir, identityFileName), 0
		}, ReasonForeign},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.kind)
			f.write(1, 300, 4)
			g := groupReport(t, verifyUnchanged(t, f.root), "shard-0")
			wantIntact(t, &Report{Groups: []*GroupReport{g}})
			if g.FirstIndex != 1 || g.LastIndex != 300 || g.Term != 4 || g.FactsIndex != 300 || g.FactsTerm != 4 || g.LogStore != tc.kind {
				t.Fatalf("intact replica read as %+v", g)
			}
			file, index := tc.harm(t, f)
			g = groupReport(t, verifyUnchanged(t, f.root), "shard-0")
			d := wantOnly(t, g, tc.reason, file, index)
			// A start refuses it for the same reason, file and index.
			_, err := f.open()
			od := wantDamage(t, err, tc.reason)
			if od.File != d.File || od.Index != d.Index {
				t.Fatalf("open refuses for %s at %d, verify says %s at %d", od.File, od.Index, d.File, d.Index)
			}
		})
	}
}

// segmentBase is the base index raft-wal names a segment file with.
func segmentBase(t *testing.T, path string) uint64 {
	t.Helper()
	var base, id uint64
	if _, err := fmt.Sscanf(filepath.Base(path), "%020d-%016x.wal", &base, &id); err != nil {
		t.Fatalf("segment name %s: %v", path, err)
	}
	return base
}

// segmentHolding is the segment file whose range holds index.
func segmentHolding(t *testing.T, dir string, index uint64) string {
	t.Helper()
	st, err := walState(filepath.Join(dir, walDirName))
	if err != nil {
		t.Fatal(err)
	}
	return segmentFor(filepath.Join(dir, walDirName), st.Segments, index)
}

// A damage record keeps a replica closed; Verify says so even when its
// files now read back fine.
func TestVerifyReportsDamageRecord(t *testing.T) {
	f := newFixture(t, LogStoreWAL)
	f.write(1, 10, 1)
	seg := segmentHolding(t, f.dir, 7)
	if err := MarkDamaged(damage(f.dir, "shard-0", ReasonDiverged, seg, 7, "state digest differs")); err != nil {
		t.Fatal(err)
	}
	g := groupReport(t, verifyUnchanged(t, f.root), "shard-0")
	d := wantOnly(t, g, ReasonMarked, seg, 7)
	if !strings.Contains(d.Detail, ReasonDiverged) || !strings.Contains(d.Detail, damageFileName) {
		t.Fatalf("detail does not say what was recorded: %s", d.Detail)
	}
}

// Node-level findings: a group node.json lists whose directory is gone,
// raft state without node.json, directories that hold no replica.
func TestVerifyNodeDirectory(t *testing.T) {
	t.Run("group directory gone", func(t *testing.T) {
		f := newFixture(t, LogStoreWAL)
		f.write(1, 10, 1)
		rm(t, f.dir, "")
		g := groupReport(t, verifyUnchanged(t, f.root), "shard-0")
		wantOnly(t, g, ReasonGroupMissing, f.dir, 0)
	})
	t.Run("node.json lost", func(t *testing.T) {
		f := newFixture(t, LogStoreWAL)
		f.write(1, 10, 1)
		rm(t, f.root, nodeFileName)
		rep := verifyUnchanged(t, f.root)
		if len(rep.Node) != 1 || rep.Node[0].Reason != ReasonLegacy {
			t.Fatalf("node problems %v, want %s", rep.Node, ReasonLegacy)
		}
		// Its replicas are still checked.
		wantIntact(t, &Report{Groups: []*GroupReport{groupReport(t, rep, "shard-0")}})
	})
	t.Run("moved aside and being rejoined", func(t *testing.T) {
		f := newFixture(t, LogStoreWAL)
		f.write(1, 10, 1)
		to, err := Discard(f.dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.node.Rejoin("shard-0", "", true); err != nil {
			t.Fatal(err)
		}
		rep := verifyUnchanged(t, f.root)
		wantIntact(t, rep)
		if g := groupReport(t, rep, "shard-0"); g.Note == "" {
			t.Fatalf("a group being rejoined has no note: %+v", g)
		}
		if len(rep.NotChecked) != 1 || rep.NotChecked[0] != to {
			t.Fatalf("not checked %v, want [%s]", rep.NotChecked, to)
		}
	})
	t.Run("not a data directory", func(t *testing.T) {
		root := t.TempDir()
		if _, err := Verify(root); err == nil || !strings.Contains(err.Error(), "not a raftq data directory") {
			t.Fatalf("empty directory: %v", err)
		}
		if _, err := Verify(filepath.Join(root, "nope")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("missing directory: %v", err)
		}
		if entries, _ := os.ReadDir(root); len(entries) != 0 {
			t.Fatalf("verify wrote into an empty directory: %v", entries)
		}
	})
}

// A replica held open by a running node is not read: Verify says the
// node is running instead of waiting for the lock or racing its writes.
func TestVerifyRefusesARunningReplica(t *testing.T) {
	for _, kind := range []string{LogStoreWAL, LogStoreBolt} {
		t.Run(kind, func(t *testing.T) {
			f := newFixture(t, kind)
			f.write(1, 10, 1)
			r := f.mustOpen()
			defer r.Close()
			type result struct {
				rep *Report
				err error
			}
			done := make(chan result, 1)
			go func() {
				rep, err := Verify(f.root)
				done <- result{rep, err}
			}()
			select {
			case res := <-done:
				if !errors.Is(res.err, ErrInUse) || !strings.Contains(res.err.Error(), "the node is running; stop it first") {
					t.Fatalf("verify of an open replica: %+v, %v", res.rep, res.err)
				}
			case <-time.After(60 * time.Second):
				t.Fatal("verify of an open replica did not answer")
			}
			// Once it is closed, the same directory verifies.
			_ = r.Close()
			wantIntact(t, verifyUnchanged(t, f.root))
		})
	}
}

// counterFSM keeps every command it applies; its snapshot is their bytes.
type counterFSM struct {
	mu   sync.Mutex
	data []byte
}

func (m *counterFSM) Apply(l *raft.Log) interface{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.data = append(m.data, l.Data...)
	return nil
}

func (m *counterFSM) Snapshot() (raft.FSMSnapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return &bytesSnapshot{b: append([]byte(nil), m.data...)}, nil
}

func (m *counterFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.data = b
	m.mu.Unlock()
	return nil
}

type bytesSnapshot struct{ b []byte }

func (s *bytesSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s.b); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}
func (s *bytesSnapshot) Release() {}

// runRaft runs a real single-node raft group on the fixture's replica
// with raft's file snapshot store, applies entries in rounds and takes a
// snapshot after each round but the last, so the log is compacted behind
// the snapshots (TrailingLogs 10). It returns the newest snapshot's index.
func runRaft(t *testing.T, f *fixture, rounds, perRound int) uint64 {
	t.Helper()
	rep := f.mustOpen()
	defer rep.Close()
	snaps, err := raft.NewFileSnapshotStore(f.dir, 3, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	_, trans := raft.NewInmemTransport("n1")
	cfg := raft.DefaultConfig()
	cfg.LocalID = "n1"
	cfg.Logger = nil
	cfg.LogOutput = io.Discard
	cfg.HeartbeatTimeout = 50 * time.Millisecond
	cfg.ElectionTimeout = 50 * time.Millisecond
	cfg.LeaderLeaseTimeout = 50 * time.Millisecond
	cfg.CommitTimeout = 5 * time.Millisecond
	cfg.SnapshotThreshold = 1 << 40 // only the snapshots taken here
	cfg.SnapshotInterval = time.Hour
	cfg.TrailingLogs = 10
	if err := raft.BootstrapCluster(cfg, rep.Logs(), rep.Stable(), snaps, trans,
		raft.Configuration{Servers: []raft.Server{{ID: "n1", Address: trans.LocalAddr()}}}); err != nil {
		t.Fatal(err)
	}
	if err := rep.MarkReady(); err != nil {
		t.Fatal(err)
	}
	r, err := raft.NewRaft(cfg, GuardFSM(&counterFSM{}, rep), rep.Logs(), rep.Stable(), snaps, trans)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := r.Shutdown().Error(); err != nil {
			t.Errorf("raft shutdown: %v", err)
		}
	}()
	deadline := time.Now().Add(60 * time.Second)
	for r.State() != raft.Leader {
		if time.Now().After(deadline) {
			t.Fatal("single-node raft never led")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var newest uint64
	n := uint64(0)
	for round := range rounds {
		for range perRound {
			n++
			if err := r.ApplyLog(Command(body(n)), 30*time.Second).Error(); err != nil {
				t.Fatalf("apply %d: %v", n, err)
			}
		}
		if round == rounds-1 {
			break
		}
		fut := r.Snapshot()
		if err := fut.Error(); err != nil {
			t.Fatalf("snapshot: %v", err)
		}
		meta, _, err := fut.Open()
		if err != nil {
			t.Fatal(err)
		}
		newest = meta.Index
	}
	return newest
}

// A directory written by a real raft group, with snapshots and a log
// compacted behind them, verifies intact; a damaged snapshot and snapshots
// gone are reported.
func TestVerifyWithSnapshots(t *testing.T) {
	for _, kind := range []string{LogStoreWAL, LogStoreBolt} {
		t.Run(kind, func(t *testing.T) {
			f := newFixture(t, kind)
			newest := runRaft(t, f, 3, 300)
			rep := verifyUnchanged(t, f.root)
			wantIntact(t, rep)
			g := groupReport(t, rep, "shard-0")
			if g.Snapshots != 2 || g.SnapshotIndex != newest || g.FirstIndex <= 1 || g.FirstIndex > newest+1 || g.LastIndex < newest+300 {
				t.Fatalf("report %+v, want 2 snapshots, the newest at %d, and a log compacted behind it", g, newest)
			}

			t.Run("state.bin damaged", func(t *testing.T) {
				state := filepath.Join(newestSnapshotDir(t, f.dir), snapshotStateBin)
				flipIn(t, state, body(5))
				g := groupReport(t, verifyUnchanged(t, f.root), "shard-0")
				wantOnly(t, g, ReasonSnapshot, state, newest)
				flipped := body(5)
				flipped[10] ^= 0x20
				flipIn(t, state, flipped) // the byte back as it was
				wantIntact(t, verifyUnchanged(t, f.root))
			})
			t.Run("snapshots gone", func(t *testing.T) {
				rm(t, f.dir, snapshotsDirName)
				g := groupReport(t, verifyUnchanged(t, f.root), "shard-0")
				d := wantOnly(t, g, ReasonSnapshotGone, filepath.Join(f.dir, snapshotsDirName), g.FirstIndex)
				r, err := Open(f.options())
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				if od := wantDamage(t, r.CheckCovered(0), ReasonSnapshotGone); od.Index != d.Index {
					t.Fatalf("open says index %d, verify %d", od.Index, d.Index)
				}
			})
		})
	}
}

func newestSnapshotDir(t *testing.T, dir string) string {
	t.Helper()
	w := &where{dir: dir}
	snaps, problems, err := w.listSnapshots()
	if err != nil || len(problems) > 0 || len(snaps) == 0 {
		t.Fatalf("snapshots %v problems %v err %v", snaps, problems, err)
	}
	return snaps[0].dir
}
