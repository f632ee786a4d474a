package raftstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// damageFileName marks a replica that was found damaged: while it exists
// the replica is not opened, so a restart cannot bring back a replica that
// was stopped for a reason. Repair moves the directory aside.
const damageFileName = "DAMAGED.json"

// RepairAdvice says what an operator does about a damaged replica.
const RepairAdvice = "it must be removed from its group and re-added empty: run `raftq cluster repair NODE` " +
	"(or start raftq-node with --repair), see docs/operations.md"

// Damage reasons (DamageError.Reason); they label metrics and logs.
const (
	ReasonNoIdentity    = "identity-missing"     // raft state without replica.json
	ReasonForeign       = "foreign-directory"    // replica.json names another node or group
	ReasonStoreMissing  = "store-missing"        // raft.db, wal/ or facts gone
	ReasonTermLost      = "term-lost"            // the stable store's term is below what it stored before
	ReasonLogShort      = "log-short"            // the log ends before what it had made durable
	ReasonSnapshotGone  = "snapshot-missing"     // a compacted log with no snapshot to cover it
	ReasonSnapshot      = "snapshot-damaged"     // a snapshot's bytes do not match its CRC, or it does not restore
	ReasonChecksum      = "checksum"             // an entry's bytes do not match its checksum
	ReasonSegment       = "segment-damaged"      // a log segment file was cut or its metadata does not match
	ReasonDiverged      = "diverged"             // its state digest differs from the other replicas'
	ReasonGroupMissing  = "group-missing"        // node.json lists a group whose directory is gone
	ReasonNodeLostState = "node-lost-state"      // the cluster knows this node but its data directory is empty
	ReasonUnreadable    = "unreadable"           // a store could not be opened or read
	ReasonMarked        = "previously-damaged"   // DAMAGED.json was left by an earlier detection
	ReasonLegacy        = "unsupported-format"   // written by a raftq without identity files
	ReasonCreating      = "creation-interrupted" // internal: never returned to callers
)

// DamageError says why a replica may not vote or serve.
type DamageError struct {
	Group  string    `json:"group"`
	Dir    string    `json:"dir"`
	Reason string    `json:"reason"`
	Detail string    `json:"detail"`
	File   string    `json:"file,omitempty"`
	Index  uint64    `json:"index,omitempty"`
	When   time.Time `json:"detected_at"`
}

func (e *DamageError) Error() string {
	where := ""
	if e.File != "" {
		where = " (file " + e.File
		if e.Index > 0 {
			where += fmt.Sprintf(", index %d", e.Index)
		}
		where += ")"
	} else if e.Index > 0 {
		where = fmt.Sprintf(" (index %d)", e.Index)
	}
	return fmt.Sprintf("replica %s in %s is damaged: %s%s; it will not vote or serve: %s",
		e.Group, e.Dir, e.Detail, where, RepairAdvice)
}

// IsDamage reports whether err says a replica is damaged, and returns it.
func IsDamage(err error) (*DamageError, bool) {
	var d *DamageError
	ok := errors.As(err, &d)
	return d, ok
}

func damage(dir, group, reason, file string, index uint64, format string, args ...any) *DamageError {
	return &DamageError{Group: group, Dir: dir, Reason: reason, File: file, Index: index,
		Detail: fmt.Sprintf(format, args...), When: time.Now().UTC()}
}

// MarkDamaged records d in its replica's directory so that the replica
// stays closed across restarts until it is repaired.
func MarkDamaged(d *DamageError) error {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return fmt.Errorf("encode damage record: %w", err)
	}
	if err := os.MkdirAll(d.Dir, 0o700); err != nil {
		return fmt.Errorf("mark %s damaged: %w", d.Dir, err)
	}
	if err := writeFileSync(filepath.Join(d.Dir, damageFileName), append(b, '\n')); err != nil {
		return fmt.Errorf("mark %s damaged: %w", d.Dir, err)
	}
	return nil
}

// readDamage returns the damage recorded in dir, or nil.
func readDamage(dir string) (*DamageError, error) {
	path := filepath.Join(dir, damageFileName)
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	d := &DamageError{}
	if err := json.Unmarshal(b, d); err != nil {
		return &DamageError{Dir: dir, Reason: ReasonMarked, File: path, Detail: "an unreadable damage record", When: time.Now().UTC()}, nil
	}
	d.Dir = dir
	return d, nil
}
