// Package fsm is the deterministic queue state machine of one shard. It
// implements raft.FSM and raft.BatchingFSM: every state change of every
// message is a command inside a replicated log entry, and applying the same
// log yields byte-identical state on every replica. See docs/fsm.md.
package fsm

import (
	"fmt"
	"io"
	"sort"
	"sync"

	"github.com/hashicorp/raft"
	"github.com/raftq/raftq/fsm/fsmpb"
	"google.golang.org/protobuf/proto"
)

// Options configures an FSM.
type Options struct {
	// Notify is called after an entry is applied, outside the FSM lock, once per queue
	// that gained ready messages (enqueue, nack, lease expiry, delayed->ready, redrive). Must not block.
	Notify func(queue string)
	// Checkpoint is called, outside the FSM lock, for every applied entry
	// holding a Tick with a checkpoint id: digest computes the sha256 of
	// the state as it stood right after that entry (the same bytes Digest
	// hashes), from a copy-on-write view, so it may run later and
	// concurrently with Apply. Must not block.
	Checkpoint func(id, index uint64, digest func() ([32]byte, error))
	// Moves, if set, is called after a batch is applied, outside the FSM
	// lock, with the messages that moved in it (lease expiry, nack, dead
	// letter, redrive, retention...; moves.go), when any did. Every
	// replica reports the same moves; the caller decides which replica
	// counts them. Must not block.
	Moves func([]MoveCount)
}

// FSM is the queue state machine of one shard. Apply and Restore take the
// write lock; the read methods take the read lock and are safe concurrently
// with Apply.
type FSM struct {
	opts Options
	mu   sync.RWMutex
	s    *state
}

// Response is the result of applying a LogCommand log: one Result per
// Entry.commands, in the same order.
type Response struct {
	Results []*fsmpb.Result
}

// Stats are the counts of one queue on this shard.
type Stats struct {
	Ready, Delayed, InFlight, Dead uint64
	OldestReadyMs                  int64 // enqueue ms of the oldest ready message, 0 if none
	// BlockedGroups counts FIFO groups with a message in flight: their
	// other messages wait for it to be settled. A group whose head is
	// delayed is waiting for a time, not blocked, and counts in Delayed.
	BlockedGroups uint64
	// Leasable counts what a Receive could lease now: Ready for a standard
	// queue; for a FIFO queue only the ready heads of groups with nothing in
	// flight (Ready also counts messages queued behind a blocked head).
	// Long-poll waiters should test this, not Ready.
	Leasable uint64
	// LiveBytes sums the bodies of ready, delayed and leased messages.
	LiveBytes uint64
	// Acked counts completed records still retained for look-ups.
	Acked uint64
	// Dropped counts messages that reached the DLQ condition while the queue
	// had dlq_disabled, and were therefore deleted.
	Dropped uint64
	// ResultBytes sums the results of the acked records; Evicted counts
	// acked records dropped early to keep it within the queue's
	// completed_max_bytes_per_shard (results.go).
	ResultBytes, Evicted uint64
	// DeadExpired counts dead messages discarded after the queue's
	// dead_retention_ms.
	DeadExpired uint64
	// Retained counts a topic's publications kept for replay
	// (topics.go). A topic reports them here and nothing as ready,
	// delayed or leasable: nothing receives them, and an age alert on
	// ready messages must not fire for a topic.
	Retained uint64
}

// maxClockMs bounds the clock so that clock + any delay, lease or retention
// the limits allow cannot overflow int64 (about 36 million years).
const maxClockMs = int64(1) << 60

// New returns an empty FSM.
func New(opts Options) *FSM { return &FSM{opts: opts, s: newState()} }

var (
	_ raft.FSM         = (*FSM)(nil)
	_ raft.BatchingFSM = (*FSM)(nil)
)

// Apply applies one log.
func (f *FSM) Apply(l *raft.Log) interface{} { return f.ApplyBatch([]*raft.Log{l})[0] }

// ApplyBatch applies logs in order and returns exactly one response per log:
// a *Response for LogCommand logs, nil for the rest. An entry that does not
// decode, or holds a command kind this binary does not know and may not
// skip (IgnorableKindMin), is a divergence this replica cannot recover
// from: it panics before applying any log of the batch.
func (f *FSM) ApplyBatch(logs []*raft.Log) []interface{} {
	// Decode before taking the lock: readers (Stats, NextDue, long polls)
	// are not held up by protobuf work.
	entries := make([]*fsmpb.Entry, len(logs))
	for i, l := range logs {
		if l.Type != raft.LogCommand {
			continue
		}
		e, err := DecodeEntry(l.Data)
		if err != nil {
			panic(fmt.Sprintf("fsm: log index %d term %d cannot be applied: %v; "+
				"this replica must stop rather than diverge (is it older than the leader?)", l.Index, l.Term, err))
		}
		checkKinds(e, l.Index, l.Term)
		entries[i] = e
	}
	out := make([]interface{}, len(logs))
	var checkpoints []checkpoint
	f.mu.Lock()
	s := f.s
	s.touched = map[string]struct{}{}
	if f.opts.Moves != nil {
		s.moves = map[moveKey]uint64{}
	}
	for i, l := range logs {
		if l.Index > s.applied {
			s.applied = l.Index
		}
		if entries[i] != nil {
			out[i] = s.applyEntry(entries[i], l.Term)
			if id := checkpointOf(entries[i]); id != 0 && f.opts.Checkpoint != nil {
				checkpoints = append(checkpoints, checkpoint{id: id, index: l.Index, v: s.view(true)})
			}
		}
	}
	touched := sortedKeys(s.touched)
	s.touched = nil
	moves := s.moves
	s.moves = nil
	f.mu.Unlock()
	if len(moves) > 0 {
		f.opts.Moves(sortedMoves(moves))
	}
	if f.opts.Notify != nil {
		for _, q := range touched {
			f.opts.Notify(q)
		}
	}
	for _, c := range checkpoints {
		f.opts.Checkpoint(c.id, c.index, c.v.digest)
	}
	return out
}

func sortedKeys(m map[string]struct{}) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Clock is the FSM clock in Unix ms: the largest leader stamp applied.
func (f *FSM) Clock() int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.s.clock
}

// AppliedIndex is the raft index of the last applied log.
func (f *FSM) AppliedIndex() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.s.applied
}

// NextDue is the earliest time at which a delayed message becomes ready, a
// lease expires or a message reaches its retention: when the leader should
// propose a Tick. ok is false when nothing is scheduled.
func (f *FSM) NextDue() (ms int64, ok bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.s.nextDue()
}

// Queues returns a copy of the queue policies.
func (f *FSM) Queues() map[string]*fsmpb.QueuePolicy {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make(map[string]*fsmpb.QueuePolicy, len(f.s.queues))
	for name, q := range f.s.queues {
		out[name] = clonePolicy(q.policy)
	}
	return out
}

// Stats returns the counts of a queue; ok is false if the queue does not
// exist on this shard.
func (f *FSM) Stats(queue string) (Stats, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	q, ok := f.s.queues[queue]
	if !ok {
		return Stats{}, false
	}
	st := Stats{
		Ready:         q.nReady,
		Delayed:       q.nDelayed,
		InFlight:      q.nLeased,
		Dead:          q.nDead,
		Leasable:      q.leasable(),
		LiveBytes:     q.liveBytes,
		Acked:         q.nAcked,
		Dropped:       q.dropped,
		ResultBytes:   q.resultBytes,
		Evicted:       q.evicted,
		DeadExpired:   q.deadExpired,
		OldestReadyMs: f.s.oldestReady(q),
	}
	if q.isTopic() {
		st = Stats{Retained: q.nReady + q.nDelayed, LiveBytes: q.liveBytes}
	}
	if q.fifo() {
		// Only a group's head is ever leased, so each leased message is
		// one group in flight.
		st.BlockedGroups = q.nLeased
	}
	return st, true
}

// Leasable is Stats(queue).Leasable without the other counts, for the
// receive path, which asks on every call.
func (f *FSM) Leasable(queue string) (uint64, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	q, ok := f.s.queues[queue]
	if !ok {
		return 0, false
	}
	return q.leasable(), true
}

// oldestReady is the enqueue time of the oldest leasable message: the first of
// each priority band of a standard queue, the first ready head of a FIFO one.
func (s *state) oldestReady(q *queue) int64 {
	var oldest int64
	consider := func(it readyItem) {
		if m, ok := s.get(it.id); ok && (oldest == 0 || m.enqueuedMs < oldest) {
			oldest = m.enqueuedMs
		}
	}
	if q.fifo() {
		if it, ok := q.ready.Min(); ok {
			consider(it)
		}
		return oldest
	}
	for p := uint64(0); p <= MaxPriority; p++ {
		q.ready.AscendGreaterOrEqual(readyItem{key: p << 56}, func(it readyItem) bool {
			if it.key>>56 == p {
				consider(it)
			}
			return false
		})
	}
	return oldest
}

// Message returns a message in any state, including acked records still
// retained (without body). The body is shared with the FSM: do not modify it.
func (f *FSM) Message(id uint64) (*fsmpb.Message, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	m, ok := f.s.get(id)
	if !ok {
		return nil, false
	}
	return m.toProto(true), true
}

// ListDead lists up to limit dead messages of a queue, oldest death first.
func (f *FSM) ListDead(queue string, limit int) []*fsmpb.Message {
	return f.ListDeadFrom(queue, 0, 0, limit)
}

// ListDeadFrom lists up to limit dead messages of a queue in (death time,
// id) order, from (fromMs, fromID) inclusive: a page after a cursor.
func (f *FSM) ListDeadFrom(queue string, fromMs int64, fromID uint64, limit int) []*fsmpb.Message {
	f.mu.RLock()
	defer f.mu.RUnlock()
	q, ok := f.s.queues[queue]
	if !ok || limit <= 0 {
		return nil
	}
	var out []*fsmpb.Message
	q.dead.AscendGreaterOrEqual(timeItem{fromMs, fromID}, func(it timeItem) bool {
		m, _ := f.s.get(it.id)
		out = append(out, m.toProto(true))
		return len(out) < limit
	})
	return out
}

// Counters returns the shard-wide totals (enqueued, acked, ...).
func (f *FSM) Counters() *fsmpb.Counters {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return proto.Clone(f.s.counters).(*fsmpb.Counters)
}

// Restore replaces the whole state with a snapshot.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	s, err := readSnapshot(rc)
	if err != nil {
		return fmt.Errorf("restore fsm snapshot: %w", err)
	}
	f.mu.Lock()
	f.s = s
	var ready []string
	for name, q := range s.queues {
		if q.ready.Len() > 0 {
			ready = append(ready, name)
		}
	}
	f.mu.Unlock()
	sort.Strings(ready)
	if f.opts.Notify != nil {
		for _, q := range ready {
			f.opts.Notify(q)
		}
	}
	return nil
}
