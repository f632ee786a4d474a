package raftgroup

import (
	"io"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// logBytes is what an FSM has applied since its state was last captured for
// a snapshot or read from one: the bytes of those log entries, and when that
// was. The snapshot scheduler compares the bytes with the last snapshot's
// size: rewriting a snapshot of a large state after a little log costs far
// more disk than the log it replaces.
//
// raft calls the FSM's Apply, Snapshot and Restore from one goroutine, so
// resetting at Snapshot counts exactly the entries the snapshot does not
// hold, whoever asked for it. A snapshot whose write then fails has still
// reset the count; the next one is only later for it.
type logBytes struct {
	n  atomic.Uint64
	at atomic.Int64 // unix nanoseconds of the last capture or restore
}

func newLogBytes() *logBytes {
	b := &logBytes{}
	b.reset()
	return b
}

func (b *logBytes) reset() {
	b.n.Store(0)
	b.at.Store(time.Now().UnixNano())
}

// since is the count of bytes applied since the last snapshot or restore.
func (b *logBytes) since() uint64 { return b.n.Load() }

// age is the time since the last snapshot or restore (or since the count
// began, if neither has happened).
func (b *logBytes) age() time.Duration { return time.Since(time.Unix(0, b.at.Load())) }

// countingFSM adds the size of every entry it applies to logBytes; a
// snapshot or a restore starts the count again.
type countingFSM struct {
	raft.FSM
	bytes *logBytes
}

func (f countingFSM) Apply(l *raft.Log) interface{} {
	f.bytes.n.Add(uint64(len(l.Data)))
	return f.FSM.Apply(l)
}

func (f countingFSM) Snapshot() (raft.FSMSnapshot, error) {
	s, err := f.FSM.Snapshot()
	if err == nil {
		f.bytes.reset()
	}
	return s, err
}

func (f countingFSM) Restore(rc io.ReadCloser) error {
	err := f.FSM.Restore(rc)
	f.bytes.reset()
	return err
}

// countingBatchingFSM keeps raft's batched apply for an FSM that has it
// (raft looks for raft.BatchingFSM on the FSM it is given; it also looks
// for raft.ConfigurationStore, which no FSM here implements and this
// wrapper would hide).
type countingBatchingFSM struct {
	countingFSM
	batch raft.BatchingFSM
}

func (f countingBatchingFSM) ApplyBatch(logs []*raft.Log) []interface{} {
	var n uint64
	for _, l := range logs {
		n += uint64(len(l.Data))
	}
	f.bytes.n.Add(n)
	return f.batch.ApplyBatch(logs)
}

// countLogBytes wraps f so that the bytes it applies are counted in b.
func countLogBytes(f raft.FSM, b *logBytes) raft.FSM {
	c := countingFSM{FSM: f, bytes: b}
	if bf, ok := f.(raft.BatchingFSM); ok {
		return countingBatchingFSM{countingFSM: c, batch: bf}
	}
	return c
}
