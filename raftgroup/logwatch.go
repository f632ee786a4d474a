package raftgroup

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// DefaultStallAfter is how long a raft log or stable-store write may be in
// flight before the replica counts as stalled. Appends normally take
// milliseconds; a busy disk's worst fsyncs take a few hundred (the
// snapshot bursts in docs/shard.md), so a second is a disk that has
// stopped, while leaving the followers time to elect a replacement within
// the 3 s failover bar.
const DefaultStallAfter = time.Second

// stableRetry spaces the retries of a stable-store write refused for lack
// of space (see watchedStable).
const stableRetry = 250 * time.Millisecond

// spaceCheck spaces the free-space checks that end a no-space episode.
const spaceCheck = time.Second

// DiskOptions says how a raft group's disk writes are watched.
type DiskOptions struct {
	// StallAfter: a log append or truncation or a stable-store write
	// (term, vote) in flight this long makes the replica stalled until it
	// completes. 0: DefaultStallAfter; negative: never.
	StallAfter time.Duration
	// OnFatal is called once, from the failing write, when a write fails
	// with anything but lack of space: an fsync error (after which the
	// page cache may have dropped the data, so it is never retried) or
	// another I/O error. The process must stop: cmd/node logs and exits,
	// and on restart the replica recovers from what its log holds. The
	// write also returns the error, which raft treats as a failed append
	// (nothing acknowledged). Nil: the failure is only logged.
	OnFatal func(error)
}

// DiskWatchConfig configures NewDiskWatch.
type DiskWatchConfig struct {
	Group   string // "meta", "shard-3": names the group in logs and metrics
	Dir     string // the group's raft directory
	Options DiskOptions
	Logger  *slog.Logger
	// Room is the free space in Dir that ends a no-space episode: enough
	// for the next log segment (SpaceRoom). Default SpaceRoom(RaftTuning{}).
	Room uint64

	// Test, if set, puts faults under the watched stores (tests only).
	Test *DiskTestHooks
}

// DiskTestHooks let tests put a failing or blocking store under the watch
// and fake the free space; nil fields change nothing.
type DiskTestHooks struct {
	Logs   func(raft.LogStore) raft.LogStore
	Stable func(raft.StableStore) raft.StableStore
	Space  func(string) (free, total uint64, err error)
}

// SpaceRoom is the free space a group with tuning t needs to append again
// after running out: one full WAL segment and a few MiB for the
// stable store and the WAL's metadata.
func SpaceRoom(t RaftTuning) uint64 {
	seg := uint64(t.WALSegmentBytes)
	if seg == 0 {
		seg = 64 << 20 // raft-wal's default segment
	}
	return seg + 4<<20
}

// DiskWatch times and sorts the writes of one raft group's log and stable
// store (OpenRaft wraps them when RaftOptions.Disk is set):
//
//   - A write in flight longer than StallAfter starts a stall episode:
//     logged at ERROR once, Stalled reported true (the shard sidelines
//     itself and holds all its raft traffic, so its followers elect a
//     replica that can write), false again when every late write is done.
//   - A write refused for lack of space starts a no-space episode: logged,
//     Full reported true (the replica stops campaigning; raft has already
//     stepped down if it led), false once the directory has Room free.
//   - Any other write error is fatal: OnFatal.
type DiskWatch struct {
	cfg    DiskWatchConfig
	logger *slog.Logger
	space  func(string) (uint64, uint64, error)
	closed chan struct{}
	close  sync.Once
	fatal  sync.Once

	mu         sync.Mutex
	stalled    func(bool)
	full       func(bool)
	late       int // writes in flight past StallAfter
	stallSince time.Time
	stallOp    string
	isFull     bool

	// lastAppend hands the classified error of a failed append past
	// raft's LogCache, which flattens errors into strings, to raft's
	// apply futures (frontLogs). raft stores logs from one goroutine.
	lastAppend atomic.Pointer[DiskError]

	stalls, fulls atomic.Uint64
	stalledNow    atomic.Bool
	fullNow       atomic.Bool
	appendNanos   atomic.Uint64
	appendHist    [len(AppendBuckets) + 1]atomic.Uint64
}

// AppendBuckets are the upper bounds, in seconds, of the append latency
// histogram (DiskStats.AppendBuckets).
var AppendBuckets = [...]float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// NewDiskWatch returns a watch for one group; Attach says what to do about
// stalls and lack of space, Close stops it.
func NewDiskWatch(cfg DiskWatchConfig) *DiskWatch {
	if cfg.Options.StallAfter == 0 {
		cfg.Options.StallAfter = DefaultStallAfter
	}
	if cfg.Room == 0 {
		cfg.Room = SpaceRoom(RaftTuning{})
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	w := &DiskWatch{cfg: cfg, logger: cfg.Logger, space: DiskSpace, closed: make(chan struct{})}
	if cfg.Test != nil && cfg.Test.Space != nil {
		w.space = cfg.Test.Space
	}
	return w
}

// Attach sets the reactions to stalls and lack of space (either may be
// nil) and reports the current state to them at once. They are called
// with the watch's lock held, in order: they must not block or call back
// into the watch.
func (w *DiskWatch) Attach(stalled, full func(bool)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stalled, w.full = stalled, full
	if w.late > 0 && stalled != nil {
		stalled(true)
	}
	if w.isFull && full != nil {
		full(true)
	}
}

// Close ends the watch: no-space episodes stop checking for space and
// stable-store writes waiting for space give up (so raft can shut down).
func (w *DiskWatch) Close() error {
	if w != nil {
		w.close.Do(func() { close(w.closed) })
	}
	return nil
}

// DiskStats is a point-in-time view of a watch, for metrics.
type DiskStats struct {
	Group        string
	Stalled      bool   // a write has been in flight longer than StallAfter
	Stalls       uint64 // stall episodes since start
	Full         bool   // a write failed for lack of space and Room is not free yet
	FullEpisodes uint64
	// Appends: count, total time and per-bucket counts (not cumulative;
	// the last counts those above every bound of AppendBuckets).
	AppendCount   uint64
	AppendSeconds float64
	AppendHist    []uint64
}

// Stats reports the watch's counters.
func (w *DiskWatch) Stats() DiskStats {
	st := DiskStats{
		Group: w.cfg.Group, Stalled: w.stalledNow.Load(), Stalls: w.stalls.Load(),
		Full: w.fullNow.Load(), FullEpisodes: w.fulls.Load(),
		AppendSeconds: float64(w.appendNanos.Load()) / 1e9,
		AppendHist:    make([]uint64, len(w.appendHist)),
	}
	for i := range w.appendHist {
		st.AppendHist[i] = w.appendHist[i].Load()
		st.AppendCount += st.AppendHist[i]
	}
	return st
}

// write runs one store write under the stall timer and sorts its error.
// retryNoSpace keeps trying a write refused for lack of space until it
// succeeds or the watch closes (stable-store writes, see watchedStable).
func (w *DiskWatch) write(op string, retryNoSpace bool, fn func() error) error {
	done := w.begin(op)
	defer done()
	for {
		start := time.Now()
		err := fn()
		if op == opAppend {
			w.observeAppend(time.Since(start))
		}
		if err == nil {
			return nil
		}
		kind := classifyWrite(err)
		if kind == 0 {
			return err
		}
		de := &DiskError{Group: w.cfg.Group, Op: op, Dir: w.cfg.Dir, Kind: kind, Err: err}
		if kind == DiskFatal {
			w.onFatal(de)
			return de
		}
		w.onNoSpace(de)
		if !retryNoSpace {
			return de
		}
		select {
		case <-w.closed:
			return de
		case <-time.After(stableRetry):
		}
	}
}

const (
	opAppend   = "append"
	opTruncate = "truncate"
	opStable   = "stable"
)

// late is one write in flight, as the stall timer sees it.
type lateWrite struct {
	op      string
	start   time.Time
	overdue bool
	done    bool
}

func (w *DiskWatch) begin(op string) func() {
	if w.cfg.Options.StallAfter < 0 {
		return func() {}
	}
	lw := &lateWrite{op: op, start: time.Now()}
	t := time.AfterFunc(w.cfg.Options.StallAfter, func() { w.overdue(lw) })
	return func() {
		t.Stop()
		w.finished(lw)
	}
}

func (w *DiskWatch) overdue(lw *lateWrite) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if lw.done {
		return
	}
	lw.overdue = true
	w.late++
	if w.late > 1 {
		return
	}
	w.stallSince, w.stallOp = lw.start, lw.op
	w.stalls.Add(1)
	w.stalledNow.Store(true)
	// React before logging: a log written to the stalled disk would block.
	if w.stalled != nil {
		w.stalled(true)
	}
	w.logger.Error("raft store write stalled: this replica holds back its raft traffic and will not lead until the write completes",
		"group", w.cfg.Group, "op", lw.op, "dir", w.cfg.Dir, "in_flight", time.Since(lw.start).Round(time.Millisecond))
}

func (w *DiskWatch) finished(lw *lateWrite) {
	w.mu.Lock()
	defer w.mu.Unlock()
	lw.done = true
	if !lw.overdue {
		return
	}
	w.late--
	if w.late > 0 {
		return
	}
	w.stalledNow.Store(false)
	w.logger.Warn("raft store write completed after stalling: replica resumes",
		"group", w.cfg.Group, "op", w.stallOp, "dir", w.cfg.Dir, "stalled_for", time.Since(w.stallSince).Round(time.Millisecond))
	if w.stalled != nil {
		w.stalled(false)
	}
}

func (w *DiskWatch) observeAppend(d time.Duration) {
	w.appendNanos.Add(uint64(d))
	s := d.Seconds()
	i := 0
	for i < len(AppendBuckets) && s > AppendBuckets[i] {
		i++
	}
	w.appendHist[i].Add(1)
}

func (w *DiskWatch) onFatal(de *DiskError) {
	w.fatal.Do(func() {
		w.logger.Error("raft store write failed: the node must stop", "group", de.Group, "op", de.Op, "dir", de.Dir, "err", de.Err)
		if w.cfg.Options.OnFatal != nil {
			w.cfg.Options.OnFatal(de)
		}
	})
}

func (w *DiskWatch) onNoSpace(de *DiskError) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.isFull {
		return
	}
	w.isFull = true
	w.fulls.Add(1)
	w.fullNow.Store(true)
	if w.full != nil {
		w.full(true)
	}
	w.logger.Error("raft store write refused: no space left; this replica will not lead until space is freed",
		"group", de.Group, "op", de.Op, "dir", de.Dir, "need_free", w.cfg.Room, "err", de.Err)
	go w.awaitSpace()
}

// awaitSpace ends the no-space episode once Dir has Room free.
func (w *DiskWatch) awaitSpace() {
	t := time.NewTicker(spaceCheck)
	defer t.Stop()
	for {
		select {
		case <-w.closed:
			return
		case <-t.C:
		}
		free, _, err := w.space(w.cfg.Dir)
		if err != nil || free < w.cfg.Room {
			continue
		}
		w.mu.Lock()
		w.isFull = false
		w.fullNow.Store(false)
		w.logger.Info("raft store has space again: replica may lead", "group", w.cfg.Group, "dir", w.cfg.Dir, "free", free)
		if w.full != nil {
			w.full(false)
		}
		w.mu.Unlock()
		return
	}
}

// logStore wraps the group's log store (below raft's LogCache): appends
// and truncations are timed and their errors sorted. Nil w: s itself.
func (w *DiskWatch) logStore(s raft.LogStore) raft.LogStore {
	if w == nil {
		return s
	}
	if t := w.cfg.Test; t != nil && t.Logs != nil {
		s = t.Logs(s)
	}
	return &watchedLogs{LogStore: s, w: w}
}

// front wraps the LogCache raft uses, so a failed append reaches raft's
// apply futures as the *DiskError it was (the cache flattens it).
func (w *DiskWatch) front(s raft.LogStore) raft.LogStore {
	if w == nil {
		return s
	}
	return &frontLogs{LogStore: s, w: w}
}

// stableStore wraps the group's stable store: writes are timed and their
// errors sorted, and a write refused for lack of space is retried until
// it succeeds: raft panics when it cannot persist its current term, and
// the term or vote must be on disk before raft acts on it, so waiting (a
// stall, as far as the replica is concerned) is the only safe answer.
func (w *DiskWatch) stableStore(s raft.StableStore) raft.StableStore {
	if w == nil {
		return s
	}
	if t := w.cfg.Test; t != nil && t.Stable != nil {
		s = t.Stable(s)
	}
	return &watchedStable{StableStore: s, w: w}
}

type watchedLogs struct {
	raft.LogStore
	w *DiskWatch
}

func (l *watchedLogs) StoreLog(log *raft.Log) error { return l.StoreLogs([]*raft.Log{log}) }

func (l *watchedLogs) StoreLogs(logs []*raft.Log) error {
	err := l.w.write(opAppend, false, func() error { return l.LogStore.StoreLogs(logs) })
	var de *DiskError
	if errors.As(err, &de) {
		l.w.lastAppend.Store(de)
	} else {
		l.w.lastAppend.Store(nil)
	}
	return err
}

func (l *watchedLogs) DeleteRange(lo, hi uint64) error {
	return l.w.write(opTruncate, false, func() error { return l.LogStore.DeleteRange(lo, hi) })
}

func (l *watchedLogs) IsMonotonic() bool { return isMonotonic(l.LogStore) }

type frontLogs struct {
	raft.LogStore
	w *DiskWatch
}

func (l *frontLogs) StoreLog(log *raft.Log) error { return l.StoreLogs([]*raft.Log{log}) }

func (l *frontLogs) StoreLogs(logs []*raft.Log) error {
	err := l.LogStore.StoreLogs(logs)
	if err != nil {
		if de := l.w.lastAppend.Swap(nil); de != nil {
			return de
		}
	}
	return err
}

func (l *frontLogs) IsMonotonic() bool { return isMonotonic(l.LogStore) }

func isMonotonic(s raft.LogStore) bool {
	m, ok := s.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

type watchedStable struct {
	raft.StableStore
	w *DiskWatch
}

func (s *watchedStable) Set(k, v []byte) error {
	return s.w.write(opStable, true, func() error { return s.StableStore.Set(k, v) })
}

func (s *watchedStable) SetUint64(k []byte, v uint64) error {
	return s.w.write(opStable, true, func() error { return s.StableStore.SetUint64(k, v) })
}

var (
	_ raft.MonotonicLogStore = (*watchedLogs)(nil)
	_ raft.MonotonicLogStore = (*frontLogs)(nil)
)
