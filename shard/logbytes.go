package shard

import (
	"io"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// logBytes counts the bytes of the log entries an FSM has applied since its
// state was last written to or read from a snapshot. The snapshot scheduler
// compares it with the last snapshot's size: rewriting a snapshot of a large
// state after a little log costs far more disk than the log it replaces.
type logBytes struct{ n atomic.Uint64 }

// since is the count of bytes applied since the last snapshot or restore.
func (b *logBytes) since() uint64 { return b.n.Load() }

// snapshotted deducts taken, the count read when a snapshot was asked for,
// so what was applied while it was being written still counts.
func (b *logBytes) snapshotted(taken uint64) {
	for {
		v := b.n.Load()
		if b.n.CompareAndSwap(v, v-min(v, taken)) {
			return
		}
	}
}

// countingFSM adds the size of every entry it applies to logBytes; a
// restore starts the count again.
type countingFSM struct {
	raft.FSM
	bytes *logBytes
}

func (f countingFSM) Apply(l *raft.Log) interface{} {
	f.bytes.n.Add(uint64(len(l.Data)))
	return f.FSM.Apply(l)
}

func (f countingFSM) Restore(rc io.ReadCloser) error {
	err := f.FSM.Restore(rc)
	f.bytes.n.Store(0)
	return err
}

// countingBatchingFSM keeps raft's batched apply for an FSM that has it
// (raft looks for raft.BatchingFSM on the FSM it is given).
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
