package raftgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"

	wal "github.com/hashicorp/raft-wal"
	"github.com/raftq/raftq/raftstore"
	"go.etcd.io/bbolt"
)

// DiskErrorKind says what a failed raft store write means for the replica.
type DiskErrorKind int

const (
	// DiskFatal: the write failed in a way the process must not survive:
	// an fsync error (the kernel may already have dropped the dirty pages,
	// so a retried fsync can report success for data that never reached
	// the disk) or any other I/O error. The node stops; on restart it
	// recovers from what its log holds on disk.
	DiskFatal DiskErrorKind = iota + 1
	// DiskNoSpace: the filesystem had no room (ENOSPC, EDQUOT) for a write
	// or a preallocation. Nothing was written that raft counts on: the
	// write is refused and may be tried again once space is freed.
	DiskNoSpace
)

func (k DiskErrorKind) String() string {
	switch k {
	case DiskFatal:
		return "fatal"
	case DiskNoSpace:
		return "no-space"
	}
	return "unknown"
}

// ErrNoSpace matches (errors.Is) a DiskError of kind DiskNoSpace.
var ErrNoSpace = errors.New("no space left for the raft log")

// DiskError is a failed write of a raft group's log or stable store.
type DiskError struct {
	Group string        // "meta", "shard-3"
	Op    string        // "append", "truncate", "stable"
	Dir   string        // the group's raft directory
	Kind  DiskErrorKind //
	Err   error
}

func (e *DiskError) Error() string {
	return fmt.Sprintf("%s: raft %s write in %s failed (%s): %v", e.Group, e.Op, e.Dir, e.Kind, e.Err)
}

func (e *DiskError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrNoSpace) hold for no-space errors.
func (e *DiskError) Is(target error) bool { return target == ErrNoSpace && e.Kind == DiskNoSpace }

// classifyWrite sorts an error from a store write: 0 for errors that are
// not about the disk (the store is closed while raft shuts down), else the
// kind.
//
// No space is ENOSPC or EDQUOT from anything but an fsync. An fsync that
// fails with ENOSPC (possible where space is allocated at writeback) is
// an fsync failure like any other: fatal. Go reports fsync as a
// *PathError with Op "sync"; bbolt reports its fdatasync as a bare errno,
// so a bare ENOSPC from bbolt counts as no space. That is safe for bbolt:
// it rolls the transaction back, writes the meta page only after the data
// pages synced, and rewrites every page of the next transaction from
// memory, so no later commit depends on pages the failed one left dirty.
func classifyWrite(err error) DiskErrorKind {
	if errors.Is(err, raftstore.ErrStoreBroken) {
		return DiskFatal
	}
	if err == nil || errors.Is(err, wal.ErrClosed) || errors.Is(err, bbolt.ErrDatabaseNotOpen) {
		return 0
	}
	var pe *fs.PathError
	synced := errors.As(err, &pe) && pe.Op == "sync"
	if !synced && (errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)) {
		return DiskNoSpace
	}
	return DiskFatal
}
