package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/raftq/raftq/internal/diskfault"
)

// Damager is what the damage nemesis needs of a backend beyond Cluster:
// the nodes' files, a start with --repair, and when a repair is done.
// Backends whose files the harness cannot reach (compose) lack it.
type Damager interface {
	// DataDir is node i's data directory on this machine.
	DataDir(i int) string
	// StartRepair starts node i with --repair (and every later start).
	StartRepair(i int) error
	// Repaired is nil once node i has no damaged replica and votes again
	// in every group it belongs to.
	Repaired(ctx context.Context, i int) error
}

// Damage modes: what happens to the stopped node's files.
const (
	LoseDisk     = "lose-disk"     // the whole data directory is gone
	TruncateTail = "truncate-tail" // a group's newest log segment loses its last 8 KiB of data
	FlipBytes    = "flip-bytes"    // 1-4 bytes inverted inside a group's newest log segment
)

var damageModes = []string{LoseDisk, TruncateTail, FlipBytes}

const (
	// tailCut is what truncate-tail removes (issue #26 cut 8 KiB).
	tailCut = 8 << 10
	// flipMargin keeps flips out of the end of the log: a kill -9 may
	// leave the replica's facts up to 200 ms of appends behind its log
	// (raftstore.DefaultFactsEvery), and a flip there would make raft-wal
	// drop entries the facts do not yet know about, which no check can
	// see (the one loss docs/operations.md says the checks miss). Flips
	// before it are found: by the entry checksums, or, when they break a
	// frame and raft-wal stops reading there, by the facts.
	flipMargin = 64 << 10
	// repairWait bounds how long the undo waits for the node to be back.
	repairWait = 90 * time.Second
)

// damage stops one node (kill -9 or SIGTERM), damages its files in one of
// damageModes and starts it with --repair, which removes the replicas it
// finds damaged from their groups and re-adds them empty. One node at a
// time: while a repair is unfinished, the same node is chosen again. The
// undo waits until the node votes again everywhere.
func (n *Nemesis) damage(ctx context.Context, begin func(string)) (string, func(context.Context) error, error) {
	d, ok := n.Cluster.(Damager)
	if !ok {
		return "", nil, errors.New("this backend cannot damage node files")
	}
	c := n.Cluster
	i, why := n.damaged, "its repair is unfinished"
	if i < 0 {
		i, why = n.target(ctx)
	}
	hard := n.rng.IntN(2) == 0
	mode := damageModes[n.rng.IntN(len(damageModes))]
	stop := "SIGTERM"
	if hard {
		stop = "kill -9"
	}
	begin(fmt.Sprintf("damage %s %s (%s, %s)", mode, n.id(i), why, stop))
	if c.Running(i) {
		var err error
		if hard {
			err = c.Kill(ctx, i)
		} else {
			err = c.Stop(ctx, i)
		}
		if err != nil {
			return "", nil, err
		}
	}
	mode, what, err := damageFiles(d.DataDir(i), mode, n.rng)
	if err != nil {
		// The node must come back either way.
		return "", nil, errors.Join(fmt.Errorf("damage %s: %w", n.id(i), err), d.StartRepair(i))
	}
	n.damaged = i
	if err := d.StartRepair(i); err != nil {
		return "", nil, err
	}
	desc := fmt.Sprintf("damage %s %s (%s, %s): %s", mode, n.id(i), why, stop, what)
	undo := func(ctx context.Context) error {
		wctx, cancel := context.WithTimeout(ctx, repairWait)
		defer cancel()
		var last error
		for {
			if !c.Running(i) {
				if err := d.StartRepair(i); err != nil {
					return err
				}
			}
			if last = d.Repaired(wctx, i); last == nil {
				n.damaged = -1
				return nil
			}
			if !sleep(wctx, 500*time.Millisecond) {
				return fmt.Errorf("%s not repaired within %v: %w", n.id(i), repairWait, last)
			}
		}
	}
	return desc, undo, nil
}

// damageFiles damages the stopped node's files under dataDir in mode and
// says what it did, and in which mode: truncate-tail and flip-bytes pick
// a raft group (meta or a shard) with a log segment at random; flip-bytes
// falls back to truncate-tail when the group's log holds too little to
// flip before flipMargin, and both to lose-disk when no group has a
// segment (a node wiped again before it rejoined).
func damageFiles(dataDir, mode string, rng *rand.Rand) (string, string, error) {
	var segs []string
	if mode != LoseDisk {
		groups := []string{diskfault.MetaDir(dataDir)}
		shards, err := filepath.Glob(filepath.Join(dataDir, "shards", "*"))
		if err != nil {
			return "", "", err
		}
		for _, g := range shards {
			// Only live replicas: a repair leaves <id>.damaged-<time> beside them.
			if _, err := strconv.ParseUint(filepath.Base(g), 10, 32); err == nil {
				groups = append(groups, g)
			}
		}
		for _, g := range groups {
			if seg, err := diskfault.NewestSegment(g); err == nil {
				segs = append(segs, seg)
			}
		}
	}
	if len(segs) == 0 {
		if err := os.RemoveAll(dataDir); err != nil {
			return "", "", err
		}
		return LoseDisk, "removed " + dataDir, nil
	}
	seg := segs[rng.IntN(len(segs))]
	if mode == FlipBytes {
		end, err := diskfault.DataEnd(seg)
		if err != nil {
			return "", "", err
		}
		if span := end - flipMargin - diskfault.SegmentHeader; span > 0 {
			off := diskfault.SegmentHeader + rng.Int64N(span)
			k := 1 + rng.IntN(4)
			if err := diskfault.Flip(seg, off, k); err != nil {
				return "", "", err
			}
			return mode, fmt.Sprintf("flipped %d bytes at %s:%d (data ends at %d)", k, seg, off, end), nil
		}
	}
	size, err := diskfault.CutTail(seg, tailCut)
	if err != nil {
		return "", "", err
	}
	return TruncateTail, fmt.Sprintf("cut %s to %d bytes", seg, size), nil
}
