// Package fsm is the deterministic queue state machine of one shard. It
// implements raft.FSM and raft.BatchingFSM: every state change of every
// message is a command inside a replicated log entry, and applying the same
// log yields byte-identical state on every replica.
package fsm

import (
	"io"
	"sync"

	"github.com/hashicorp/raft"
	"github.com/raftq/raftq/fsm/fsmpb"
)

// Options configures an FSM.
type Options struct {
	// Notify is called after an entry is applied, outside the FSM lock, once per queue
	// that gained ready messages (enqueue, nack, lease expiry, delayed->ready, redrive). Must not block.
	Notify func(queue string)
}

// FSM is the queue state machine of one shard.
type FSM struct {
	opts Options
	mu   sync.RWMutex
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
	BlockedGroups                  uint64
}

// New returns an empty FSM.
func New(opts Options) *FSM { return &FSM{opts: opts} }

var (
	_ raft.FSM         = (*FSM)(nil)
	_ raft.BatchingFSM = (*FSM)(nil)
)

// Apply applies one log.
func (f *FSM) Apply(l *raft.Log) interface{} { return nil }

// ApplyBatch applies logs in order and returns exactly one response per log.
func (f *FSM) ApplyBatch(logs []*raft.Log) []interface{} { return make([]interface{}, len(logs)) }

// Snapshot returns a point-in-time snapshot.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) { return nil, nil }

// Restore replaces the state with a snapshot.
func (f *FSM) Restore(rc io.ReadCloser) error { return rc.Close() }

// Clock is the FSM clock in Unix ms.
func (f *FSM) Clock() int64 { return 0 }

// AppliedIndex is the raft index of the last applied log.
func (f *FSM) AppliedIndex() uint64 { return 0 }

// NextDue is the earliest delayed-due time or lease deadline.
func (f *FSM) NextDue() (ms int64, ok bool) { return 0, false }

// Queues returns a copy of the queue policies.
func (f *FSM) Queues() map[string]*fsmpb.QueuePolicy { return nil }

// Stats returns the counts of a queue.
func (f *FSM) Stats(queue string) (Stats, bool) { return Stats{}, false }

// Message returns a message in any state.
func (f *FSM) Message(id uint64) (*fsmpb.Message, bool) { return nil, false }

// ListDead lists up to limit dead messages of a queue, oldest first.
func (f *FSM) ListDead(queue string, limit int) []*fsmpb.Message { return nil }

// Digest is the sha256 of the snapshot stream and the applied index.
func (f *FSM) Digest() ([32]byte, uint64, error) { return [32]byte{}, 0, nil }
