package shard

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// storeAndClose appends entries first..last to the group in dir, opened
// as want, and reports the store it got.
func storeAndClose(t *testing.T, dir, want string, first, last uint64) string {
	t.Helper()
	st, err := openStores(dir, want, 0, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}()
	var logs []*raft.Log
	for i := first; i <= last; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte{byte(i)}})
	}
	if err := st.logs.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := st.stable.SetUint64([]byte("CurrentTerm"), last); err != nil {
		t.Fatal(err)
	}
	return st.kind
}

// checkLog reopens dir as want and checks it holds entries 1..last and
// the term written last.
func checkLog(t *testing.T, dir, want string, last uint64) string {
	t.Helper()
	st, err := openStores(dir, want, 0, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	lo, _ := st.logs.FirstIndex()
	hi, _ := st.logs.LastIndex()
	if lo != 1 || hi != last {
		t.Fatalf("log holds %d..%d, want 1..%d", lo, hi, last)
	}
	for i := uint64(1); i <= last; i++ {
		var l raft.Log
		if err := st.logs.GetLog(i, &l); err != nil || l.Data[0] != byte(i) {
			t.Fatalf("entry %d: %v %v", i, l.Data, err)
		}
	}
	if term, err := st.stable.GetUint64([]byte("CurrentTerm")); err != nil || term != last {
		t.Fatalf("stable term %d (%v), want %d", term, err, last)
	}
	return st.kind
}

func TestLogStoreDefaultIsWALAndSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	if kind := storeAndClose(t, dir, "", 1, 10); kind != LogStoreWAL {
		t.Fatalf("new group got %q, want %q", kind, LogStoreWAL)
	}
	if _, err := os.Stat(filepath.Join(dir, walDirName)); err != nil {
		t.Fatalf("no wal directory: %v", err)
	}
	storeAndClose(t, dir, LogStoreWAL, 11, 20)
	checkLog(t, dir, LogStoreWAL, 20)
}

// A group keeps its store whatever it is asked for next: switching would
// start an empty log beside the real one.
func TestLogStoreGroupKeepsItsStore(t *testing.T) {
	for _, tc := range []struct{ created, asked string }{{LogStoreBolt, LogStoreWAL}, {LogStoreWAL, LogStoreBolt}} {
		t.Run(tc.created, func(t *testing.T) {
			dir := t.TempDir()
			if kind := storeAndClose(t, dir, tc.created, 1, 5); kind != tc.created {
				t.Fatalf("created %q, got %q", tc.created, kind)
			}
			if kind := storeAndClose(t, dir, tc.asked, 6, 9); kind != tc.created {
				t.Fatalf("reopened as %q, want the %q it was created with", kind, tc.created)
			}
			if kind := checkLog(t, dir, tc.asked, 9); kind != tc.created {
				t.Fatalf("reopened as %q", kind)
			}
		})
	}
}

func TestLogStoreRejectsUnknownKind(t *testing.T) {
	dir := t.TempDir()
	_, err := openStores(dir, "rocksdb", 0, testLogger())
	if err == nil || !strings.Contains(err.Error(), `log store "rocksdb"`) {
		t.Fatalf("unknown store: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("refused open left %d files", len(ents))
	}
}
