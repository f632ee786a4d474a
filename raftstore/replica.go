package raftstore

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// DefaultFactsEvery is how often a replica's durable log index reaches its
// facts file. A log that loses entries appended within this window before
// a crash, without any sign in its files (a disk that acknowledged writes
// it never made), is the one loss the open-time checks cannot see.
const DefaultFactsEvery = 200 * time.Millisecond

// Options opens one replica's stores.
type Options struct {
	Dir    string // the group's directory
	NodeID string
	Group  string // raft group name, e.g. "meta" or "shard-0"
	// Node is the node's identity; it records the groups the node has
	// created. Nil only in tests of a lone replica.
	Node *Node
	// LogStore is the kind for a new replica (LogStoreWAL by default); an
	// existing replica keeps the kind its identity records.
	LogStore        string
	WALSegmentBytes int
	FactsEvery      time.Duration
	Logger          *slog.Logger
	// Damaged is called (once, from the goroutine that found it) when the
	// replica finds damaged bytes while running, after the damage is
	// recorded in its directory. The replica must stop: raft cannot go on
	// without the entry it could not read.
	Damaged func(*DamageError)
	// WrapLogs, if set, wraps the raw log store underneath the checks (a
	// write watchdog, for instance).
	WrapLogs func(raft.LogStore) raft.LogStore
}

// Replica is one raft replica's checked stores. Open returns it only when
// every check passed; raft must be started on Logs and Stable, never on
// the raw stores.
type Replica struct {
	o      Options
	id     *ReplicaIdentity
	st     *stores
	facts  *factsWriter
	logs   *checkedLogs
	stable *checkedStable
	w      where // names its files in messages (checks.go)

	fresh        bool
	mayBootstrap bool

	damageOnce sync.Once
	closeOnce  sync.Once
	closeErr   error
}

// Open checks and opens the replica in o.Dir, or creates it when the node
// never had it. It refuses, with a *DamageError, a replica that has less
// than it had: no identity beside raft state, a missing stable store, log
// or facts, a term or log below its facts, a cut log segment, an entry
// whose checksum does not match, a directory of another node, or an
// earlier damage record. Such a replica must not vote or serve: it is
// repaired by removing it from its group and re-adding it empty.
func Open(o Options) (*Replica, error) {
	if o.Dir == "" || o.NodeID == "" || o.Group == "" {
		return nil, errors.New("raftstore: Open needs Dir, NodeID and Group")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.FactsEvery <= 0 {
		o.FactsEvery = DefaultFactsEvery
	}
	if o.LogStore == "" {
		o.LogStore = LogStoreWAL
	}
	if err := validKind(o.LogStore); err != nil {
		return nil, err
	}
	r := &Replica{o: o, w: where{dir: o.Dir, group: o.Group}}
	if err := r.identify(); err != nil {
		return nil, err
	}
	if err := r.open(); err != nil {
		return nil, err
	}
	return r, nil
}

// identify reads or creates the replica's identity and checks that the
// files it needs are there (checks.go).
func (r *Replica) identify() error {
	o := r.o
	d, err := readDamage(o.Dir)
	if err != nil {
		return err
	}
	if d != nil {
		d.Group = o.Group
		return d
	}
	entry, registered := GroupEntry{}, false
	if o.Node != nil {
		entry, registered = o.Node.group(o.Group)
	}
	id, err := checkIdentity(o.Dir, o.NodeID, o.Group, entry, registered)
	if err != nil {
		return err
	}
	if id == nil || id.State == stateCreating {
		return r.create(id, entry, registered)
	}
	r.w.kind = id.LogStore
	missing, err := r.w.missingStores()
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return missing[0]
	}
	if id.LogStore == LogStoreWAL {
		segs, problems, err := checkSegments(&r.w)
		if err != nil {
			return err
		}
		if len(problems) > 0 {
			return problems[0]
		}
		r.w.segments = segs
	}
	r.id = id
	return nil
}

// create sets up a replica the node does not have yet (checkIdentity
// allowed it). prev is an identity whose creation never finished: raft
// never ran in that directory, so it never voted or acknowledged anything
// and may be wiped.
func (r *Replica) create(prev *ReplicaIdentity, entry GroupEntry, registered bool) error {
	o := r.o
	if prev != nil {
		o.Logger.Warn("replica creation was interrupted before raft ran; starting it again", "dir", o.Dir)
	}
	// Clear what is inside, not the directory itself: it may be a mount
	// point.
	if err := clearDir(o.Dir); err != nil {
		return fmt.Errorf("clear replica dir: %w", err)
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return fmt.Errorf("create replica dir: %w", err)
	}
	if err := syncDir(filepath.Dir(o.Dir)); err != nil {
		return err
	}
	id := &ReplicaIdentity{Format: FormatVersion, NodeID: o.NodeID, Group: o.Group, Incarnation: newIncarnation(),
		LogStore: o.LogStore, State: stateCreating, CreatedAt: time.Now().UTC()}
	if registered && entry.State == GroupRejoin && entry.Incarnation != "" {
		id.Incarnation = entry.Incarnation
	}
	if err := writeIdentity(o.Dir, id); err != nil {
		return err
	}
	if err := createFacts(filepath.Join(o.Dir, factsFileName)); err != nil {
		return err
	}
	r.id, r.fresh = id, true
	r.w.kind = id.LogStore
	// A replica re-created for repair joins its group through raft; only
	// one the node never had may take part in the group's bootstrap.
	r.mayBootstrap = !registered
	return nil
}

// open opens the stores and checks them against the facts.
func (r *Replica) open() (err error) {
	o := r.o
	var syncs *SyncTimes
	if o.Node != nil {
		syncs = &o.Node.walSyncs
	}
	st, err := openStores(o.Dir, r.id.LogStore, o.WALSegmentBytes, o.Logger, syncs)
	if err != nil {
		if r.fresh || errors.Is(err, ErrInUse) {
			return err
		}
		return damage(o.Dir, o.Group, ReasonUnreadable, o.Dir, 0, "stores do not open: %v", err)
	}
	r.st = st
	defer func() {
		if err != nil {
			_ = r.Close()
		}
	}()
	if r.facts, err = openFacts(filepath.Join(o.Dir, factsFileName), o.FactsEvery); err != nil {
		return damage(o.Dir, o.Group, ReasonUnreadable, filepath.Join(o.Dir, factsFileName), 0, "facts unreadable: %v", err)
	}
	inner := st.logs
	if o.WrapLogs != nil {
		inner = o.WrapLogs(inner)
	}
	r.logs = &checkedLogs{inner: inner, facts: r.facts, damaged: r.damagedAt}
	r.stable = &checkedStable{StableStore: st.stable, facts: r.facts}
	if r.fresh {
		return nil
	}
	if d := r.w.checkTerm(st.stable, r.facts.current()); d != nil {
		return d
	}
	// Every entry is read back and checked, so damaged bytes stop the
	// replica before raft replays or ships them.
	if problems := r.w.scanLog(st.logs, 1); len(problems) > 0 {
		return problems[0]
	}
	return nil
}

// logFile names the file that holds index, for messages.
func (r *Replica) logFile(index uint64) string { return r.w.logFile(index) }

// CheckCovered compares the log with the facts once the newest snapshot's
// index is known: the log, or a snapshot, must reach the index this
// replica made durable, and a log whose head was compacted must start
// right after a snapshot.
func (r *Replica) CheckCovered(snapshotIndex uint64) error {
	if r.fresh {
		return nil
	}
	return r.w.checkCovered(r.st.logs, r.facts.current(), snapshotIndex)
}

// damagedAt records damage found while running and tells the owner.
func (r *Replica) damagedAt(index uint64, cause error) error {
	d := damage(r.o.Dir, r.o.Group, ReasonChecksum, r.logFile(index), index, "%v", cause)
	r.Damage(d)
	return d
}

// Damage records d (found by this replica or by comparing it with
// others) and calls Options.Damaged once.
func (r *Replica) Damage(d *DamageError) {
	r.damageOnce.Do(func() {
		if err := MarkDamaged(d); err != nil {
			r.o.Logger.Error("could not record replica damage", "err", err)
		}
		r.o.Logger.Error("replica damaged: it stops voting and serving", "group", r.o.Group, "reason", d.Reason, "detail", d.Detail, "file", d.File, "index", d.Index, "repair", RepairAdvice)
		if r.o.Damaged != nil {
			r.o.Damaged(d)
		}
	})
}

// Diverged is the damage of replica r whose state digest at index (own)
// differs from the one a quorum of its group recorded there (quorum).
func Diverged(r *Replica, index uint64, own, quorum []byte) *DamageError {
	return damage(r.o.Dir, r.o.Group, ReasonDiverged, "", index,
		"its state digest after index %d is %x, a quorum of its group has %x: its state diverged", index, own[:8], quorum[:min(8, len(quorum))])
}

// Fresh reports whether Open created the replica.
func (r *Replica) Fresh() bool { return r.fresh }

// MayBootstrap reports whether the replica may take part in bootstrapping
// its group: it is new and the node never had it before (a replica
// re-created for repair joins through raft instead).
func (r *Replica) MayBootstrap() bool { return r.fresh && r.mayBootstrap }

// Identity is the replica's identity.
func (r *Replica) Identity() ReplicaIdentity { return *r.id }

// Logs is the checked log store raft must use.
func (r *Replica) Logs() raft.LogStore { return r.logs }

// Stable is the checked stable store raft must use.
func (r *Replica) Stable() raft.StableStore { return r.stable }

// Facts are the durable facts as last written.
func (r *Replica) Facts() Facts { return r.facts.current() }

// MarkReady records that the replica is set up (bootstrapped, if it takes
// part) and that the node has it; raft may run from then on.
func (r *Replica) MarkReady() error {
	if r.id.State != stateReady {
		id := *r.id
		id.State = stateReady
		if err := writeIdentity(r.o.Dir, &id); err != nil {
			return err
		}
		r.id = &id
	}
	if r.o.Node != nil {
		return r.o.Node.markCreated(r.o.Group, r.id.Incarnation)
	}
	return nil
}

// Close writes the facts one last time and closes the stores.
func (r *Replica) Close() error {
	r.closeOnce.Do(func() {
		var errs []error
		if r.facts != nil {
			if r.logs != nil {
				if last, err := r.st.logs.LastIndex(); err == nil {
					// Everything the log holds at a clean close is durable.
					r.facts.noteIndex(last)
				}
			}
			errs = append(errs, r.facts.Close())
		}
		if r.st != nil {
			errs = append(errs, r.st.Close())
		}
		r.closeErr = errors.Join(errs...)
	})
	return r.closeErr
}
