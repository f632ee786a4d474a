package raftstore

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// CheckedSnapshots is a replica's snapshot store as raft must see it.
// raft restores the newest snapshot at start and, when that one does not
// read back (its bytes fail their CRC), silently restores an older one,
// or retries forever when there is none; either way nobody is told the
// replica's files are damaged. Here the first snapshot that does not read
// back while raft starts is damage: every later Open during the start
// fails too, so raft never falls back, and StartDamage names the file for
// the caller to refuse the replica with. Once raft runs (Running), a
// snapshot whose bytes fail their CRC when read (to send it to a follower)
// stops the replica (Replica.Damage), as a damaged log entry does.
type CheckedSnapshots struct {
	raft.SnapshotStore
	rep     *Replica
	dir     string // the store's snapshots directory, for messages
	running atomic.Bool
	atStart atomic.Pointer[DamageError]
}

// CheckSnapshots wraps the replica's snapshot store, whose snapshots live
// in the replica directory's snapshots/ (raft.FileSnapshotStore's layout).
func (r *Replica) CheckSnapshots(s raft.SnapshotStore) *CheckedSnapshots {
	return &CheckedSnapshots{SnapshotStore: s, rep: r, dir: filepath.Join(r.o.Dir, "snapshots")}
}

// crcMismatch is how raft's file snapshot store reports a snapshot whose
// bytes do not match the CRC it wrote with them.
const crcMismatch = "CRC mismatch"

// Open opens snapshot id, checking it as described on CheckedSnapshots.
func (s *CheckedSnapshots) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	if !s.running.Load() {
		if d := s.atStart.Load(); d != nil {
			return nil, nil, d
		}
	}
	meta, rc, err := s.SnapshotStore.Open(id)
	if err == nil {
		return meta, rc, nil
	}
	path := filepath.Join(s.dir, id)
	if !s.running.Load() {
		d := damage(s.rep.o.Dir, s.rep.o.Group, ReasonSnapshot, path, 0,
			"snapshot %s does not read back: %v", id, err)
		s.atStart.CompareAndSwap(nil, d)
		return nil, nil, s.atStart.Load()
	}
	// While running, a snapshot can vanish between List and Open (old ones
	// are reaped): only bytes that fail their checksum are damage.
	if strings.Contains(err.Error(), crcMismatch) {
		d := damage(s.rep.o.Dir, s.rep.o.Group, ReasonSnapshot, path, 0,
			"snapshot %s no longer matches its checksum: %v", id, err)
		s.rep.Damage(d)
		return nil, nil, d
	}
	return nil, nil, fmt.Errorf("open snapshot %s: %w", id, err)
}

// StartDamage is the damage found while raft started, or nil.
func (s *CheckedSnapshots) StartDamage() *DamageError { return s.atStart.Load() }

// Running records that raft has started: from now on a snapshot that
// cannot be opened is damage only if its bytes fail their checksum.
func (s *CheckedSnapshots) Running() { s.running.Store(true) }
