package raftstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

// verifyScanLimit bounds the damaged entries Verify lists per replica: a
// lost segment would otherwise list every entry it held.
const verifyScanLimit = 10

// Report is what Verify found in a node's data directory.
type Report struct {
	Dir    string `json:"dir"`
	NodeID string `json:"node_id,omitempty"`
	// Node lists problems of the node's own identity (node.json).
	Node   []*DamageError `json:"node_problems,omitempty"`
	Groups []*GroupReport `json:"groups"`
	// NotChecked lists directories that hold no replica (one a repair
	// moved aside, or unknown); they are left alone.
	NotChecked []string `json:"not_checked,omitempty"`
}

// GroupReport is what Verify found of one replica.
type GroupReport struct {
	Group    string         `json:"group"`
	Dir      string         `json:"dir"`
	Problems []*DamageError `json:"problems,omitempty"`
	// Note says why a replica had nothing to check: it does not exist yet,
	// or its creation was interrupted (the node creates it afresh).
	Note string `json:"note,omitempty"`
	// What the checks read, for a replica that has state.
	LogStore      string `json:"log_store,omitempty"`
	FirstIndex    uint64 `json:"first_index"`
	LastIndex     uint64 `json:"last_index"`
	Term          uint64 `json:"term"`
	FactsIndex    uint64 `json:"facts_index"`
	FactsTerm     uint64 `json:"facts_term"`
	Snapshots     int    `json:"snapshots"`
	SnapshotIndex uint64 `json:"snapshot_index"` // the newest snapshot's
}

// Damaged reports whether anything in the directory is damaged.
func (r *Report) Damaged() bool {
	if len(r.Node) > 0 {
		return true
	}
	for _, g := range r.Groups {
		if len(g.Problems) > 0 {
			return true
		}
	}
	return false
}

// Verify checks a node's data directory without changing any file: its
// node identity, and every replica directory it holds or node.json lists,
// with the checks Open makes (checks.go) plus every snapshot's state
// against its checksum. Problems are *DamageError with Open's reasons. It
// returns an error wrapping ErrInUse when a node has the directory open,
// and an error when dataDir is not a raftq data directory.
func Verify(dataDir string) (*Report, error) {
	fi, err := os.Stat(dataDir)
	if err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("data directory %s is not a directory", dataDir)
	}
	rep := &Report{Dir: dataDir}
	node, err := readNode(dataDir)
	if d, ok := IsDamage(err); ok {
		rep.Node = append(rep.Node, d)
	} else if err != nil {
		return nil, err
	} else if node == nil {
		return nil, fmt.Errorf("%s holds no %s and no raft state: not a raftq data directory", dataDir, nodeFileName)
	}
	registry := map[string]GroupEntry{}
	if node != nil {
		rep.NodeID, registry = node.NodeID, node.Groups
	}
	found, other, err := groupDirs(dataDir)
	if err != nil {
		return nil, err
	}
	rep.NotChecked = other
	names := make([]string, 0, len(found)+len(registry))
	for g := range found {
		names = append(names, g)
	}
	for g := range registry {
		if _, ok := found[g]; !ok {
			names = append(names, g)
		}
	}
	slices.SortFunc(names, groupOrder)
	for _, g := range names {
		dir, ok := found[g]
		if !ok {
			if dir, ok = groupDir(dataDir, g); !ok {
				rep.Node = append(rep.Node, damage(dataDir, "node", ReasonUnreadable, filepath.Join(dataDir, nodeFileName), 0,
					"%s lists a group named %q, which is not a raftq group", nodeFileName, g))
				continue
			}
		}
		entry, registered := registry[g]
		gr, err := verifyGroup(dir, rep.NodeID, g, entry, registered)
		if errors.Is(err, ErrInUse) {
			// Verify's own opens share their locks; only a read-write
			// open, a node's, excludes them.
			return nil, fmt.Errorf("check %s: %w: the node is running; stop it first", g, err)
		}
		if err != nil {
			return nil, fmt.Errorf("check %s: %w", g, err)
		}
		rep.Groups = append(rep.Groups, gr)
	}
	return rep, nil
}

// verifyGroup checks one replica directory. Checks that depend on a store
// that is missing or does not open are skipped; the store is reported.
func verifyGroup(dir, nodeID, group string, entry GroupEntry, registered bool) (*GroupReport, error) {
	g := &GroupReport{Group: group, Dir: dir}
	add := func(d ...*DamageError) { g.Problems = append(g.Problems, d...) }
	if ok, err := exists(dir); err != nil {
		return nil, err
	} else if !ok {
		if registered && entry.State == GroupReady {
			add(damage(dir, group, ReasonGroupMissing, dir, 0,
				"this node created the replica (node.json lists it) but its directory or identity is gone"))
		} else {
			g.Note = "no replica directory: it is being rejoined, and the node creates it empty"
		}
		return g, nil
	}
	if d, err := readDamage(dir); err != nil {
		return nil, err
	} else if d != nil {
		add(recorded(d, dir, group))
	}
	id, err := checkIdentity(dir, nodeID, group, entry, registered)
	if d, ok := IsDamage(err); ok {
		add(d)
		return g, nil
	} else if err != nil {
		return nil, err
	}
	switch {
	case id == nil:
		g.Note = "no replica here yet: the node creates it when it opens the group"
		return g, nil
	case id.State == stateCreating:
		g.Note = "its creation was interrupted before raft ran: the node creates it afresh"
		return g, nil
	}
	g.LogStore = id.LogStore
	w := &where{dir: dir, group: group, kind: id.LogStore}
	missing, err := w.missingStores()
	if err != nil {
		return nil, err
	}
	add(missing...)
	has := func(name string) bool {
		return !slices.ContainsFunc(missing, func(d *DamageError) bool {
			return d.File == w.path(name) || (filepath.Dir(name) == walDirName && d.File == w.path(walDirName))
		})
	}
	return g, verifyStores(w, g, has)
}

// verifyStores checks the stores of a replica whose identity is sound, in
// the order Open does, so the first problem is the one a start reports.
func verifyStores(w *where, g *GroupReport, has func(name string) bool) error {
	add := func(d ...*DamageError) { g.Problems = append(g.Problems, d...) }
	// raft.db stays open (a shared lock) until the checks are done, so a
	// node that starts meanwhile waits for them or fails to open it.
	var stable *raftboltdb.BoltStore
	var stableProblem *DamageError
	if has(boltFileName) {
		var err error
		stable, err = openStableReadOnly(w.path(boltFileName))
		if errors.Is(err, ErrInUse) {
			return err
		}
		if err != nil {
			stableProblem = w.damage(ReasonUnreadable, w.path(boltFileName), 0, "stores do not open: %v", err)
		} else {
			defer stable.Close()
		}
	}
	walOK := false
	if w.kind == LogStoreWAL && has(walDirName) && has(filepath.Join(walDirName, walMetaName)) {
		segs, problems, err := checkSegments(w)
		if err != nil {
			return err
		}
		add(problems...)
		w.segments, walOK = segs, len(problems) == 0
	}
	if stableProblem != nil {
		add(stableProblem)
	}
	var facts Facts
	factsOK := false
	if has(factsFileName) {
		f, _, err := readFacts(w.path(factsFileName))
		if err != nil {
			add(w.damage(ReasonUnreadable, w.path(factsFileName), 0, "facts unreadable: %v", err))
		} else {
			facts, factsOK = f, true
			g.FactsIndex, g.FactsTerm = f.Index, f.Term
		}
	}
	if stable != nil {
		g.Term, _ = stable.GetUint64(keyCurrentTerm)
		if factsOK {
			if d := w.checkTerm(stable, facts); d != nil {
				add(d)
			}
		}
	}
	var logs logReader
	switch {
	case w.kind == LogStoreBolt && stable != nil:
		logs = stable
	case walOK:
		view, file, err := openWALView(w.path(walDirName), w.segments)
		if err != nil {
			add(w.damage(ReasonSegment, file, 0, "the raft log does not open: %v", err))
			break
		}
		defer view.Close()
		logs = view
	}
	if logs != nil {
		add(w.scanLog(logs, verifyScanLimit)...)
		g.FirstIndex, _ = logs.FirstIndex()
		g.LastIndex, _ = logs.LastIndex()
	}
	snaps, problems, err := w.listSnapshots()
	if err != nil {
		add(w.damage(ReasonUnreadable, w.path(snapshotsDirName), 0, "%v", err))
	}
	add(problems...)
	for _, s := range snaps {
		if d := w.checkSnapshot(s); d != nil {
			add(d)
		}
	}
	g.Snapshots = len(snaps)
	if len(snaps) > 0 {
		g.SnapshotIndex = snaps[0].Index
	}
	if logs != nil && factsOK {
		// An index that does not read was reported by the scan.
		if d, ok := IsDamage(w.checkCovered(logs, facts, g.SnapshotIndex)); ok {
			add(d)
		}
	}
	return nil
}

// recorded reports a damage record (DAMAGED.json) left by an earlier
// detection: the replica stays closed until it is repaired, whatever its
// files look like now.
func recorded(d *DamageError, dir, group string) *DamageError {
	if d.Reason == ReasonMarked {
		d.Group = group
		return d
	}
	file := d.File
	if file == "" {
		file = filepath.Join(dir, damageFileName)
	}
	return damage(dir, group, ReasonMarked, file, d.Index, "%s records damage found %s: %s: %s",
		damageFileName, d.When.Format(time.RFC3339), d.Reason, d.Detail)
}

// openStableReadOnly opens raft.db without writing: raft-boltdb skips
// creating its buckets when read-only, so they are looked for first.
func openStableReadOnly(path string) (*raftboltdb.BoltStore, error) {
	db, err := bbolt.Open(path, 0o600, readOnlyBolt())
	if err != nil {
		return nil, inUse(path, err)
	}
	err = db.View(func(tx *bbolt.Tx) error {
		// raft-boltdb's buckets: the log, and the stable store's keys.
		for _, name := range []string{"logs", "conf"} {
			if tx.Bucket([]byte(name)) == nil {
				return fmt.Errorf("raft-boltdb's %q bucket is missing", name)
			}
		}
		return nil
	})
	if cerr := db.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	s, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: readOnlyBolt()})
	if err != nil {
		return nil, inUse(path, err)
	}
	return s, nil
}
