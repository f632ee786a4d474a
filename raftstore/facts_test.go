package raftstore

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The newest valid slot wins, and a torn write of one slot leaves the
// other: the facts never go back further than the last completed write.
func TestFactsSurviveATornSlot(t *testing.T) {
	path := filepath.Join(t.TempDir(), factsFileName)
	if err := createFacts(path); err != nil {
		t.Fatal(err)
	}
	w, err := openFacts(path, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.noteTerm(3); err != nil {
		t.Fatal(err)
	}
	w.noteIndex(40)
	if err := w.noteTerm(4); err != nil { // writes index 40 with it
		t.Fatal(err)
	}
	if err := w.lowerIndex(30); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, seq, err := readFacts(path)
	if err != nil || got != (Facts{Index: 30, Term: 4}) {
		t.Fatalf("facts %+v seq %d err %v", got, seq, err)
	}
	// Tear the newest slot: the one before it is what remains.
	b, _ := os.ReadFile(path)
	off := int(seq%2) * factsSlot
	b[off+20] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	got, _, err = readFacts(path)
	if err != nil || got != (Facts{Index: 40, Term: 4}) {
		t.Fatalf("after tearing the newest slot: %+v %v", got, err)
	}
	// Both torn: unreadable, never zero.
	b[factsSlot-off+20] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readFacts(path); err == nil {
		t.Fatal("two torn slots read as valid facts")
	}
}

// The background flush writes a raised index without the caller waiting.
func TestFactsIndexReachesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), factsFileName)
	if err := createFacts(path); err != nil {
		t.Fatal(err)
	}
	w, err := openFacts(path, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.noteIndex(77)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if f, _, err := readFacts(path); err == nil && f.Index == 77 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("index never reached the facts file")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
