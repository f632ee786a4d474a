package raftstore

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/hashicorp/raft"
)

// checkedLogs is the raft log store of a replica as raft sees it: entries
// are checked end to end before they are stored and sealed with a local
// checksum (checksum.go), checked again when read back, and every durable
// append and every tail deletion is reflected in the replica's facts
// (facts.go), so a restart can tell a log that lost entries from one that
// never had them.
type checkedLogs struct {
	inner raft.LogStore
	facts *factsWriter
	// damaged is called when bytes read back are not what was written;
	// the replica must stop (it records the damage first).
	damaged func(index uint64, err error) error

	// mu orders tail deletions against the facts they lower. raft calls
	// StoreLogs and tail deletions from its main goroutine; compaction (a
	// head deletion) runs in its snapshot goroutine and never lowers facts.
	mu sync.Mutex
}

func (s *checkedLogs) FirstIndex() (uint64, error) { return s.inner.FirstIndex() }
func (s *checkedLogs) LastIndex() (uint64, error)  { return s.inner.LastIndex() }

func (s *checkedLogs) GetLog(index uint64, l *raft.Log) error {
	if err := s.inner.GetLog(index, l); err != nil {
		return err
	}
	if err := unseal(index, l); err != nil {
		return s.damaged(index, err)
	}
	return nil
}

func (s *checkedLogs) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs refuses a batch holding a command whose bytes do not match the
// leader's checksum: nothing of it is stored or acknowledged, and the
// leader sends it again.
func (s *checkedLogs) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	sealed := make([]*raft.Log, len(logs))
	for i, l := range logs {
		if err := VerifyEntry(l); err != nil {
			return fmt.Errorf("refusing to store entries %d-%d: %w", logs[0].Index, logs[len(logs)-1].Index, err)
		}
		sealed[i] = seal(l)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.inner.StoreLogs(sealed); err != nil {
		return err
	}
	s.facts.noteIndex(logs[len(logs)-1].Index)
	return nil
}

// DeleteRange lowers the durable index before it removes a log's tail,
// so the facts never claim more than the log holds.
func (s *checkedLogs) DeleteRange(min, max uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	last, err := s.inner.LastIndex()
	if err != nil {
		return fmt.Errorf("delete log range %d-%d: %w", min, max, err)
	}
	if max >= last && min <= last && min > 0 {
		if err := s.facts.lowerIndex(min - 1); err != nil {
			return fmt.Errorf("delete log range %d-%d: %w", min, max, err)
		}
	}
	return s.inner.DeleteRange(min, max)
}

// IsMonotonic passes on raft-wal's promise: raft then clears the whole log
// after installing a snapshot instead of leaving a gap raft-wal refuses.
func (s *checkedLogs) IsMonotonic() bool {
	m, ok := s.inner.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

var _ raft.MonotonicLogStore = (*checkedLogs)(nil)

// keyCurrentTerm is where raft keeps its term in the stable store.
var keyCurrentTerm = []byte("CurrentTerm")

// checkedStable records every term raft stores in the replica's facts, so
// a stable store that loses its term (deleted, or rolled back) is caught
// before the replica votes twice in a term it forgot.
type checkedStable struct {
	raft.StableStore
	facts *factsWriter
}

func (s *checkedStable) SetUint64(key []byte, val uint64) error {
	if err := s.StableStore.SetUint64(key, val); err != nil {
		return err
	}
	if bytes.Equal(key, keyCurrentTerm) {
		return s.facts.noteTerm(val)
	}
	return nil
}
