package shard

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftq/raftq/raftmux"
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
	// 64 MiB, raft-wal's). Segments are preallocated, and compaction
	// frees whole segments only: entries stay readable until their
	// segment goes.
	WALSegmentBytes int
}

func (t RaftTuning) withDefaults() RaftTuning {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&t.HeartbeatTimeout, 500*time.Millisecond)
	def(&t.ElectionTimeout, 500*time.Millisecond)
	// A leader steps down when it has not heard from a quorum for this long.
	// At 250 ms, saturated runs (CPU-bound nodes, a GC near GOMEMLIMIT)
	// deposed healthy leaders mid-load (docs/benchmarks.md); election speed
	// is set by the heartbeat timeout, not this.
	def(&t.LeaderLeaseTimeout, 500*time.Millisecond)
	def(&t.CommitTimeout, 50*time.Millisecond)
	def(&t.SnapshotInterval, 30*time.Second)
	if t.LeaderLeaseTimeout > t.HeartbeatTimeout {
		t.LeaderLeaseTimeout = t.HeartbeatTimeout
	}
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

// RaftOptions is the generic wiring of one raft group on this node; the
// shard and the meta group share it.
type RaftOptions struct {
	NodeID    string
	Dir       string
	Transport raft.Transport
	Bootstrap []raft.Server
	Logger    *slog.Logger
	Tuning    RaftTuning
	// NotifyCh, if set, receives leadership changes (raft Config.NotifyCh).
	// Raft blocks on it: the reader must never block (raft-notes trap 7).
	NotifyCh chan<- bool
	// Disk, if set, watches the log and stable-store writes (logwatch.go).
	Disk *DiskWatch
}

// OpenRaft opens (or creates) the raft state in o.Dir — wal/ (or raft.db,
// LogStoreBolt) for the log, raft.db for the stable store, snapshots/ for
// the file snapshot store — bootstraps when
// asked and no state exists, and starts raft on f and its snapshot
// scheduler. The returned Closer stops the scheduler and closes the stores;
// call it after raft.Shutdown has completed.
func OpenRaft(o RaftOptions, f raft.FSM) (*raft.Raft, io.Closer, error) {
	if o.NodeID == "" || o.Dir == "" || o.Transport == nil {
		return nil, nil, errors.New("shard: OpenRaft needs NodeID, Dir and Transport")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	tun := o.Tuning.withDefaults()
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("shard: create raft dir: %w", err)
	}
	st, err := openStores(o.Dir, tun.LogStore, tun.WALSegmentBytes, o.Logger)
	if err != nil {
		return nil, nil, fmt.Errorf("shard: %w", err)
	}
	logs, err := raft.NewLogCache(tun.LogCacheSize, o.Disk.logStore(st.logs))
	if err != nil {
		_ = st.Close()
		return nil, nil, fmt.Errorf("shard: log cache: %w", err)
	}
	hlog := raftmux.HCLogger(o.Logger, "raft")
	files, err := raft.NewFileSnapshotStoreWithLogger(o.Dir, raftNeverReaps, hlog)
	if err != nil {
		_ = st.Close()
		return nil, nil, fmt.Errorf("shard: snapshot store: %w", err)
	}
	snaps := newWritebackStore(files, o.Dir, snapshotDirtyWindow, snapshotWritebackStep, tun.SnapshotRetain)
	closeAll := func() { _ = closers{snaps, st}.Close() }

	cfg := raft.DefaultConfig()
	cfg.LocalID = raft.ServerID(o.NodeID)
	cfg.Logger = hlog
	cfg.HeartbeatTimeout = tun.HeartbeatTimeout
	cfg.ElectionTimeout = tun.ElectionTimeout
	cfg.LeaderLeaseTimeout = tun.LeaderLeaseTimeout
	cfg.CommitTimeout = tun.CommitTimeout
	cfg.MaxAppendEntries = tun.MaxAppendEntries
	cfg.BatchApplyCh = true
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
		return nil, nil, fmt.Errorf("shard: raft config: %w", err)
	}

	if len(o.Bootstrap) > 0 {
		has, err := raft.HasExistingState(logs, st.stable, snaps)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("shard: check existing raft state: %w", err)
		}
		if !has {
			err := raft.BootstrapCluster(cfg, logs, st.stable, snaps, o.Transport,
				raft.Configuration{Servers: o.Bootstrap})
			if err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
				closeAll()
				return nil, nil, fmt.Errorf("shard: bootstrap: %w", err)
			}
		}
	}
	applied := newLogBytes()
	r, err := raft.NewRaft(cfg, countLogBytes(f, applied), o.Disk.front(logs), o.Disk.stableStore(st.stable), snaps, o.Transport)
	if err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("shard: start raft: %w", err)
	}
	sched := startSnapshotScheduler(&snapshotScheduler{
		r: r, store: snaps, applied: applied, self: cfg.LocalID,
		threshold: tun.SnapshotThreshold, interval: tun.SnapshotInterval, logger: o.Logger,
	})
	return r, closers{sched, snaps, st}, nil
}

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
