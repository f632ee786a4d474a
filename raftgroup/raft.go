package raftgroup

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftq/raftq/raftmux"
	"github.com/raftq/raftq/raftstore"
)

// RaftTuning overrides raft settings; zero fields take the defaults below,
// chosen for a write-heavy queue workload (docs/shard.md explains each).
type RaftTuning struct {
	HeartbeatTimeout   time.Duration // default 500 ms
	ElectionTimeout    time.Duration // default 500 ms
	LeaderLeaseTimeout time.Duration // default 500 ms (the heartbeat timeout)
	CommitTimeout      time.Duration // default 50 ms
	MaxAppendEntries   int           // default 512 (raft max 1024)
	// A snapshot is due after SnapshotThreshold entries (default 8192) and
	// a log as large as the last snapshot (snapsched.go); replicas take
	// turns in slots of SnapshotInterval (default 30 s) over the voters.
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64 // default 10240 entries
	LogCacheSize      int    // default 512 entries
	SnapshotRetain    int    // default 2
	// LogStore is LogStoreWAL (default) or LogStoreBolt; it applies to
	// groups created from now on (a group keeps the store it has).
	LogStore string
	// WALSegmentBytes is the size of a LogStoreWAL segment file (default
	// 64 MiB, raft-wal's). A segment's blocks are allocated as it fills
	// (raftstore/prealloc.go), and compaction frees whole segments only:
	// entries stay readable until their segment goes.
	WALSegmentBytes int
	// Quiet, if set, quiets this group's heartbeats while it is idle
	// (quiet.go): after QuietAfter (default 5 s) without an applied entry,
	// the replica's heartbeat and election timeouts become QuietHeartbeat
	// (default 1 s, at most 3 × LeaderLeaseTimeout so a quiet leader
	// keeps its lease). One Quiescer serves every group of a node.
	Quiet          *Quiescer
	QuietAfter     time.Duration
	QuietHeartbeat time.Duration

	// OnSnapshotLook, if set, is told every look of the snapshot
	// scheduler (tests only).
	OnSnapshotLook func(SnapshotLook)
}

// WithDefaults fills the zero fields with the defaults above.
func (t RaftTuning) WithDefaults() RaftTuning {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&t.HeartbeatTimeout, 500*time.Millisecond)
	def(&t.ElectionTimeout, 500*time.Millisecond)
	// A leader steps down when it has not heard from a quorum for this long.
	// At 250 ms, saturated runs (CPU-bound nodes, a GC near GOMEMLIMIT)
	// deposed healthy leaders mid-load (docs/benchmarks.md, "Settings that
	// matter"); election speed
	// is set by the heartbeat timeout, not this.
	def(&t.LeaderLeaseTimeout, 500*time.Millisecond)
	def(&t.CommitTimeout, 50*time.Millisecond)
	def(&t.SnapshotInterval, 30*time.Second)
	if t.LeaderLeaseTimeout > t.HeartbeatTimeout {
		t.LeaderLeaseTimeout = t.HeartbeatTimeout
	}
	def(&t.QuietAfter, 5*time.Second)
	def(&t.QuietHeartbeat, time.Second)
	// A quiet leader heartbeats at most QuietHeartbeat/5 apart, and a
	// coalesced heartbeat waits up to raftmux.BeatWindow more; its lease
	// needs contact within LeaderLeaseTimeout.
	t.QuietHeartbeat = min(t.QuietHeartbeat, 3*t.LeaderLeaseTimeout)
	if t.MaxAppendEntries <= 0 {
		t.MaxAppendEntries = 512
	}
	t.MaxAppendEntries = min(t.MaxAppendEntries, 1024)
	if t.SnapshotThreshold == 0 {
		t.SnapshotThreshold = 8192
	}
	if t.TrailingLogs == 0 {
		t.TrailingLogs = 10240
	}
	if t.LogCacheSize <= 0 {
		t.LogCacheSize = 512
	}
	if t.SnapshotRetain <= 0 {
		t.SnapshotRetain = 2
	}
	return t
}

// Log store kinds, as raftstore names them.
const (
	LogStoreWAL  = raftstore.LogStoreWAL
	LogStoreBolt = raftstore.LogStoreBolt
)

// RaftOptions is the generic wiring of one raft group on this node; the
// shard and the meta group share it.
type RaftOptions struct {
	NodeID string
	// Group is the raft group's name ("meta", "shard-0"); it is recorded in
	// the replica's identity.
	Group     string
	Dir       string
	Transport raft.Transport
	Bootstrap []raft.Server
	Logger    *slog.Logger
	Tuning    RaftTuning
	// Node is the node's identity (raftstore.OpenNode); nil only in tests
	// of a lone group.
	Node *raftstore.Node
	// Damaged is called once if the replica finds damaged bytes while it
	// runs (a checksum mismatch on read or before apply). The damage is
	// recorded in the replica's directory first, so it stays closed; the
	// owner must shut the group down. It must not block raft: shut down
	// from another goroutine.
	Damaged func(*raftstore.DamageError)
	// NotifyCh, if set, receives leadership changes (raft Config.NotifyCh).
	// Raft's main loop blocks on it: the reader must never block.
	NotifyCh chan<- bool
	// Disk, if set, watches the log and stable-store writes (logwatch.go).
	Disk *DiskWatch
	// Seed, if set, replaces the bootstrap of a new replica: the group
	// starts from this state, with the Bootstrap voters as configuration
	// (seed.go). Every bootstrapping replica must get the same seed.
	Seed *Seed
}

// Group is one opened raft replica: raft, its checked stores, and what
// closes them.
type Group struct {
	Raft    *raft.Raft
	Replica *raftstore.Replica
	closer  io.Closer
}

// Close stops the snapshot scheduler and closes the stores; call it after
// raft.Shutdown has completed.
func (g *Group) Close() error { return g.closer.Close() }

// OpenRaft opens (or creates) the replica in o.Dir through raftstore, which
// refuses a replica with less than it had (a *raftstore.DamageError:
// missing or shortened stores, checksum mismatches, another node's
// directory), bootstraps when asked and the replica is new, and starts
// raft on f and its snapshot scheduler.
func OpenRaft(o RaftOptions, f raft.FSM) (*Group, error) {
	if o.NodeID == "" || o.Dir == "" || o.Transport == nil {
		return nil, errors.New("raftgroup: OpenRaft needs NodeID, Dir and Transport")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Group == "" {
		o.Group = filepath.Base(o.Dir)
	}
	tun := o.Tuning.WithDefaults()
	rep, err := raftstore.Open(raftstore.Options{
		Dir: o.Dir, NodeID: o.NodeID, Group: o.Group, Node: o.Node,
		LogStore: tun.LogStore, WALSegmentBytes: tun.WALSegmentBytes,
		Logger: o.Logger, Damaged: o.Damaged, WrapLogs: o.Disk.logStore,
	})
	if err != nil {
		return nil, fmt.Errorf("raftgroup: %w", err)
	}
	logs, err := raft.NewLogCache(tun.LogCacheSize, rep.Logs())
	if err != nil {
		_ = rep.Close()
		return nil, fmt.Errorf("raftgroup: log cache: %w", err)
	}
	hlog := raftmux.HCLogger(o.Logger, "raft")
	files, err := raft.NewFileSnapshotStoreWithLogger(o.Dir, raftNeverReaps, hlog)
	if err != nil {
		_ = rep.Close()
		return nil, fmt.Errorf("raftgroup: snapshot store: %w", err)
	}
	snaps := newWritebackStore(files, o.Dir, snapshotDirtyWindow, snapshotWritebackStep, tun.SnapshotRetain)
	closeAll := func() { _ = closers{snaps, rep}.Close() }
	var snapIndex uint64
	if metas, err := snaps.List(); err == nil && len(metas) > 0 {
		snapIndex = metas[0].Index
	} else if err != nil {
		closeAll()
		return nil, fmt.Errorf("raftgroup: list snapshots: %w", err)
	}
	if err := rep.CheckCovered(snapIndex); err != nil {
		closeAll()
		return nil, fmt.Errorf("raftgroup: %w", err)
	}

	cfg := raft.DefaultConfig()
	cfg.LocalID = raft.ServerID(o.NodeID)
	cfg.Logger = hlog
	cfg.HeartbeatTimeout = tun.HeartbeatTimeout
	cfg.ElectionTimeout = tun.ElectionTimeout
	cfg.LeaderLeaseTimeout = tun.LeaderLeaseTimeout
	cfg.CommitTimeout = tun.CommitTimeout
	cfg.MaxAppendEntries = tun.MaxAppendEntries
	cfg.BatchApplyCh = true
	// Replication timings go to go-metrics once, with a peer_id label,
	// not again under a name per peer (raftq_raft_internal_*,
	// docs/metrics.md).
	cfg.NoLegacyTelemetry = true
	// Snapshots are started by our scheduler (snapsched.go), never by
	// raft's own trigger.
	cfg.SnapshotThreshold = math.MaxUint64
	cfg.SnapshotInterval = tun.SnapshotInterval
	cfg.TrailingLogs = tun.TrailingLogs
	// The FSM lives in memory: it must be rebuilt from the latest snapshot
	// plus the log on every start.
	cfg.NoSnapshotRestoreOnStart = false
	cfg.NotifyCh = o.NotifyCh
	if err := raft.ValidateConfig(cfg); err != nil {
		closeAll()
		return nil, fmt.Errorf("raftgroup: raft config: %w", err)
	}

	// Only a replica the node never had may take part in bootstrapping
	// its group: one that lost its state must not start the group afresh.
	if len(o.Bootstrap) > 0 && rep.MayBootstrap() && o.Seed != nil {
		if err := seedGroup(o.Seed, logs, rep.Stable(), snaps, o.Transport, raft.Configuration{Servers: o.Bootstrap}); err != nil {
			closeAll()
			return nil, fmt.Errorf("raftgroup: seed: %w", err)
		}
	} else if len(o.Bootstrap) > 0 && rep.MayBootstrap() {
		err := raft.BootstrapCluster(cfg, logs, rep.Stable(), snaps, o.Transport,
			raft.Configuration{Servers: o.Bootstrap})
		if err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			closeAll()
			return nil, fmt.Errorf("raftgroup: bootstrap: %w", err)
		}
	}
	if err := rep.MarkReady(); err != nil {
		closeAll()
		return nil, fmt.Errorf("raftgroup: %w", err)
	}
	applied := newLogBytes()
	guarded := raftstore.GuardFSM(countLogBytes(f, applied), rep)
	// raft restores the newest snapshot here; one that does not read back
	// makes the replica damaged instead of a silent fall back to an older
	// snapshot or an endless retry.
	checked := rep.CheckSnapshots(snaps)
	r, err := raft.NewRaft(cfg, guarded, o.Disk.front(logs), o.Disk.stableStore(rep.Stable()), checked, o.Transport)
	if d := checked.StartDamage(); d != nil {
		if err == nil {
			_ = r.Shutdown().Error()
		}
		closeAll()
		return nil, fmt.Errorf("raftgroup: %w", d)
	}
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("raftgroup: start raft: %w", err)
	}
	checked.Running()
	sched := startSnapshotScheduler(&snapshotScheduler{
		r: r, store: snaps, applied: applied, self: cfg.LocalID,
		threshold: tun.SnapshotThreshold, interval: tun.SnapshotInterval, logger: o.Logger,
		onLook: tun.OnSnapshotLook,
	})
	cs := closers{sched, snaps, rep}
	if tun.Quiet != nil {
		cs = append(closers{closeFunc(tun.Quiet.add(r, o.Transport, o.Group, tun))}, cs...)
	}
	return &Group{Raft: r, Replica: rep, closer: cs}, nil
}

// closeFunc is a func as an io.Closer.
type closeFunc func()

func (f closeFunc) Close() error { f(); return nil }

// closers closes each in order and returns the first error.
type closers []io.Closer

func (cs closers) Close() error {
	var first error
	for _, c := range cs {
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
