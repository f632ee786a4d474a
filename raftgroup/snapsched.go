package raftgroup

import (
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Snapshots are started here, not by raft's own trigger, for two reasons
// that matter once the state is large (a 1 M-message backlog of 1 KiB is a
// 1.2 GB snapshot; docs/benchmarks.md, "What bounds the ceiling"):
//
//   - When. raft snapshots whenever the log has grown by the threshold in
//     entries, and under steady load those entries can come faster than a
//     large snapshot is written, so every replica would rewrite its whole
//     state nearly all the time, many times the disk traffic of the log.
//     Here a snapshot is also due only once the log applied since the last
//     one is at least as large as that snapshot, so the snapshot never
//     writes more than the log it replaces, and a restart replays at most
//     one snapshot's worth of log. A state that has shrunk (a drained
//     backlog) would wait for a log as large as its old snapshot, so
//     after snapshotMaxAge intervals the threshold in entries is enough.
//   - Who. raft's trigger fires on every replica at a random point of each
//     interval, so two replicas' snapshots can overlap; two at once
//     saturate a shared disk, leave no idle quorum, and commits queue
//     behind the writes. Here the wall clock is
//     cut into slots, one per voter in ID order, and a replica starts a
//     snapshot only in the first half of its own slot. A slot is at least
//     twice as long as the replica's last snapshot took (and at least the
//     snapshot interval over the voter count, doubled as needed so that
//     replicas whose snapshots take about as long agree on it), so a
//     snapshot started in its slot ends in it.
//
// Slots are a matter of speed, not safety: skewed clocks, replicas that
// disagree on the slot length, or replicas of other groups on the same disk
// only make overlaps possible again, as they were under raft's trigger.
const (
	maxSnapshotSlot = time.Hour
	snapshotMaxAge  = 10 // snapshot intervals
)

// snapshotDue is the rule for when a snapshot is due: the log has grown by
// threshold entries and by at least as many bytes as the last snapshot, or
// by threshold entries and the last snapshot is maxAge old.
func snapshotDue(entries, threshold, logBytes, snapshotBytes uint64, age, maxAge time.Duration) bool {
	return entries >= threshold && (logBytes >= snapshotBytes || age >= maxAge)
}

// snapshotSlotWidth is the slot length for n voters when this replica's
// last snapshot took took.
func snapshotSlotWidth(interval time.Duration, n int, took time.Duration) time.Duration {
	w := max(interval/time.Duration(max(n, 1)), time.Millisecond)
	for w < 2*took && w < maxSnapshotSlot {
		w *= 2
	}
	return w
}

// inSnapshotSlot reports whether the voter at position pos of n may start
// a snapshot at now, with slots of width w. A replica outside the voter set
// (pos < 0), or alone in it, may start at any time, as under raft's trigger.
func inSnapshotSlot(now time.Time, pos, n int, w time.Duration) bool {
	if pos < 0 || n <= 1 {
		return true
	}
	period := w * time.Duration(n)
	off := time.Duration(now.UnixNano() % int64(period))
	start := time.Duration(pos) * w
	return off >= start && off < start+w/2
}

// voterPosition is self's index among the configuration's voters sorted by
// ID, and the voter count; -1 if self is not a voter.
func voterPosition(cfg raft.Configuration, self raft.ServerID) (int, int) {
	var ids []string
	for _, s := range cfg.Servers {
		if s.Suffrage == raft.Voter {
			ids = append(ids, string(s.ID))
		}
	}
	slices.Sort(ids)
	return slices.Index(ids, string(self)), len(ids)
}

// snapshotScheduler asks raft for a snapshot when one is due
// (snapshotDue) and this replica's slot has come.
type snapshotScheduler struct {
	r         *raft.Raft
	store     raft.SnapshotStore
	applied   *logBytes
	self      raft.ServerID
	threshold uint64
	interval  time.Duration
	logger    *slog.Logger
	// onLook, if set, is told every look (RaftTuning.OnSnapshotLook).
	onLook func(SnapshotLook)

	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

// SnapshotLook is one look of the scheduler: when, the slot it computed,
// and what it decided. Tests watch these instead of timing snapshot files.
type SnapshotLook struct {
	Self   raft.ServerID
	At     time.Time // the instant judged against the slot
	Pos, N int       // voter position and count
	Slot   time.Duration
	InSlot bool
	Due    bool  // judged only in the slot
	Began  bool  // a snapshot was asked for
	Err    error // its outcome
	Took   time.Duration
}

func startSnapshotScheduler(s *snapshotScheduler) *snapshotScheduler {
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	go s.run()
	return s
}

// Close stops the scheduler. A snapshot it asked for is waited on; after
// raft.Shutdown that wait ends at once (raft answers ErrRaftShutdown).
func (s *snapshotScheduler) Close() error {
	s.stopOnce.Do(func() { close(s.stop) })
	<-s.done
	return nil
}

func (s *snapshotScheduler) run() {
	defer close(s.done)
	var took time.Duration
	for {
		pos, n := voterPosition(s.r.GetConfiguration().Configuration(), s.self)
		w := snapshotSlotWidth(s.interval, n, took)
		// Look several times per start window, and at least every second.
		t := time.NewTimer(min(max(w/8, 5*time.Millisecond), time.Second))
		select {
		case <-s.stop:
			t.Stop()
			return
		case <-t.C:
		}
		look := SnapshotLook{Self: s.self, At: time.Now(), Pos: pos, N: n, Slot: w}
		look.InSlot = inSnapshotSlot(look.At, pos, n, w)
		look.Due = look.InSlot && s.due()
		if !look.Due {
			s.report(look)
			continue
		}
		applied := s.applied.since()
		began := time.Now()
		err := s.r.Snapshot().Error()
		look.Began, look.Err, look.Took = true, err, time.Since(began)
		s.report(look)
		switch {
		case err == nil:
			took = time.Since(began)
			s.logger.Info("snapshot taken in this replica's slot", "took", took.Round(time.Millisecond),
				"log_bytes", applied, "slot", w, "position", pos, "voters", n)
		case errors.Is(err, raft.ErrRaftShutdown):
			return
		case errors.Is(err, raft.ErrNothingNewToSnapshot):
		default:
			s.logger.Warn("scheduled snapshot failed", "err", err)
		}
	}
}

func (s *snapshotScheduler) report(l SnapshotLook) {
	if s.onLook != nil {
		s.onLook(l)
	}
}

// due reports whether a snapshot is due by snapshotDue.
func (s *snapshotScheduler) due() bool {
	last, err := strconv.ParseUint(s.r.Stats()["last_snapshot_index"], 10, 64)
	if err != nil {
		return false
	}
	li := s.r.LastIndex()
	entries := li - min(last, li)
	if entries < s.threshold {
		return false
	}
	var size uint64
	metas, err := s.store.List() // newest first
	if err != nil {
		s.logger.Warn("scheduled snapshot: list snapshots", "err", err)
		return false
	}
	if len(metas) > 0 {
		size = uint64(max(metas[0].Size, 0))
	}
	return snapshotDue(entries, s.threshold, s.applied.since(), size, s.applied.age(), snapshotMaxAge*s.interval)
}
