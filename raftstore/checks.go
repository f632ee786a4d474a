package raftstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/hashicorp/raft-wal/types"
)

// The checks in this file only read. Open runs them on the stores it opens
// for raft and stops at the first problem; Verify (verify.go) runs them on
// stores it opens read-only and reports every problem, so an operator who
// runs `raftq-node verify` sees the reasons a start would give.

// where is one replica's directory as its checks name it in messages.
type where struct {
	dir, group string
	kind       string              // log store kind (replica.json)
	segments   []types.SegmentInfo // raft-wal's segments, to name the file of an index
}

func (w *where) damage(reason, file string, index uint64, format string, args ...any) *DamageError {
	return damage(w.dir, w.group, reason, file, index, format, args...)
}

func (w *where) path(name string) string { return filepath.Join(w.dir, name) }

// logFile names the file that holds index, for messages.
func (w *where) logFile(index uint64) string {
	if w.kind == LogStoreBolt {
		return w.path(boltFileName)
	}
	return segmentFor(w.path(walDirName), w.segments, index)
}

// logReader is what the checks read of a log: raft's log store as Open
// opens it, or a read-only view of the same files (walview.go, or raft.db
// opened read-only).
type logReader interface {
	FirstIndex() (uint64, error)
	LastIndex() (uint64, error)
	GetLog(index uint64, l *raft.Log) error
}

// checkIdentity reads the identity of the replica in dir and checks it
// against the node opening it: nodeID ("" accepts any node) and the node's
// registry entry for group, if registered. A nil identity and nil error
// mean the replica does not exist and may be created; an identity in state
// creating may be created afresh. Anything else wrong is a *DamageError.
func checkIdentity(dir, nodeID, group string, entry GroupEntry, registered bool) (*ReplicaIdentity, error) {
	idPath := filepath.Join(dir, identityFileName)
	id, err := readIdentity(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if registered && entry.State == GroupReady {
			return nil, damage(dir, group, ReasonGroupMissing, dir, 0,
				"this node created the replica (node.json lists it) but its directory or identity is gone")
		}
		if found, err := anyRaftState(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		} else if found != "" {
			return nil, damage(dir, group, ReasonNoIdentity, found, 0,
				"raft state without a replica identity: written by a raftq without identity files, or replica.json was lost")
		}
		return nil, nil
	case err != nil:
		return nil, damage(dir, group, ReasonUnreadable, idPath, 0, "replica identity unreadable: %v", err)
	}
	if (nodeID != "" && id.NodeID != nodeID) || id.Group != group {
		return nil, damage(dir, group, ReasonForeign, idPath, 0,
			"the directory belongs to replica %s of node %s", id.Group, id.NodeID)
	}
	if id.State == stateCreating {
		return id, nil
	}
	if err := validKind(id.LogStore); err != nil {
		return nil, damage(dir, group, ReasonUnreadable, idPath, 0, "replica identity: %v", err)
	}
	if registered && entry.Incarnation != "" && entry.Incarnation != id.Incarnation {
		return nil, damage(dir, group, ReasonForeign, idPath, 0,
			"the directory holds incarnation %s of the replica, the node's current one is %s (an old copy restored?)", id.Incarnation, entry.Incarnation)
	}
	return id, nil
}

// missingStores lists the stores a replica of its kind must have and has
// not, in the order Open looks for them.
func (w *where) missingStores() ([]*DamageError, error) {
	need := []string{boltFileName, factsFileName}
	if w.kind == LogStoreWAL {
		need = append(need, walDirName, filepath.Join(walDirName, walMetaName))
	}
	var out []*DamageError
	walGone := false
	for _, name := range need {
		if walGone && filepath.Dir(name) == walDirName {
			continue // its directory is already reported
		}
		ok, err := exists(w.path(name))
		if err != nil {
			return nil, err
		}
		if !ok {
			out = append(out, w.damage(ReasonStoreMissing, w.path(name), 0, "%s is missing", storeRole(name)))
			walGone = walGone || name == walDirName
		}
	}
	return out, nil
}

func storeRole(name string) string {
	switch name {
	case boltFileName:
		return "the stable store (raft.db: the term and the vote)"
	case factsFileName:
		return "the facts file (the term and log index this replica made durable)"
	case walDirName:
		return "the raft log (wal/)"
	}
	return name
}

// checkTerm compares the stable store's term with the highest term the
// facts say this replica stored.
func (w *where) checkTerm(stable raft.StableStore, facts Facts) *DamageError {
	term, err := stable.GetUint64(keyCurrentTerm)
	if err != nil && !errors.Is(err, raftboltdb.ErrKeyNotFound) {
		return w.damage(ReasonUnreadable, w.path(boltFileName), 0, "term unreadable: %v", err)
	}
	if term < facts.Term {
		return w.damage(ReasonTermLost, w.path(boltFileName), 0,
			"the stable store says term %d, but this replica had stored term %d: it forgot its term and vote", term, facts.Term)
	}
	return nil
}

// scanLog reads every entry of the log back and checks it (checksum.go:
// the local block, the end-to-end block of commands, and that the entry
// read is the one asked for, so the indices are contiguous). It stops at
// the limit-th damaged entry.
func (w *where) scanLog(logs logReader, limit int) []*DamageError {
	first, err := logs.FirstIndex()
	if err != nil {
		return []*DamageError{w.damage(ReasonUnreadable, w.logFile(0), 0, "first log index unreadable: %v", err)}
	}
	last, err := logs.LastIndex()
	if err != nil {
		return []*DamageError{w.damage(ReasonUnreadable, w.logFile(0), 0, "last log index unreadable: %v", err)}
	}
	if last == 0 {
		return nil
	}
	var out []*DamageError
	var l raft.Log
	for i := first; i <= last && len(out) < limit; i++ {
		if err := logs.GetLog(i, &l); err != nil {
			out = append(out, w.damage(ReasonChecksum, w.logFile(i), i, "log entry %d unreadable: %v", i, err))
		} else if err := unseal(i, &l); err != nil {
			out = append(out, w.damage(ReasonChecksum, w.logFile(i), i, "%v", err))
		}
	}
	return out
}

// checkCovered compares the log with the facts once the newest snapshot's
// index is known: the log, or a snapshot, must reach the index this
// replica made durable, and a log whose head was compacted must start
// right after a snapshot.
func (w *where) checkCovered(logs logReader, facts Facts, snapshotIndex uint64) error {
	first, err := logs.FirstIndex()
	if err != nil {
		return fmt.Errorf("first log index: %w", err)
	}
	last, err := logs.LastIndex()
	if err != nil {
		return fmt.Errorf("last log index: %w", err)
	}
	if max(last, snapshotIndex) < facts.Index {
		return w.damage(ReasonLogShort, w.logFile(last), last,
			"the log ends at index %d and the newest snapshot at %d, but this replica had made index %d durable: its log lost entries it may have acknowledged",
			last, snapshotIndex, facts.Index)
	}
	if last > 0 && first > 1 && snapshotIndex+1 < first {
		return w.damage(ReasonSnapshotGone, w.path(snapshotsDirName), first,
			"the log starts at index %d but the newest snapshot ends at %d: the entries between are gone", first, snapshotIndex)
	}
	return nil
}
