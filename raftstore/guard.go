package raftstore

import (
	"fmt"
	"io"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// ErrStopped answers every entry after a replica found damage: it applies
// nothing more, so its state is never built from bytes it cannot trust.
var ErrStopped = fmt.Errorf("replica stopped after damage was found")

// guardFSM checks every command's end-to-end checksum right before the FSM
// sees it. The first mismatch records the damage (Replica.Damage) and from
// then on nothing is applied: each entry is answered ErrStopped, so the
// leader's callers get an error, never a result built on bad bytes.
type guardFSM struct {
	raft.FSM
	rep     *Replica
	stopped atomic.Bool
}

// GuardFSM wraps f for rep. It keeps raft.BatchingFSM when f has it.
func GuardFSM(f raft.FSM, rep *Replica) raft.FSM {
	g := &guardFSM{FSM: f, rep: rep}
	if bf, ok := f.(raft.BatchingFSM); ok {
		return &guardBatchingFSM{guardFSM: g, batch: bf}
	}
	return g
}

func (g *guardFSM) check(l *raft.Log) bool {
	if g.stopped.Load() {
		return false
	}
	if err := VerifyEntry(l); err != nil {
		g.stopped.Store(true)
		d := damage(g.rep.o.Dir, g.rep.o.Group, ReasonChecksum, g.rep.logFile(l.Index), l.Index,
			"before apply: %v", err)
		g.rep.Damage(d)
		return false
	}
	return true
}

func (g *guardFSM) Apply(l *raft.Log) interface{} {
	if !g.check(l) {
		return ErrStopped
	}
	return g.FSM.Apply(l)
}

// Restore is refused once stopped: a fresh state on a damaged replica
// would let it serve again without repair.
func (g *guardFSM) Restore(rc io.ReadCloser) error {
	if g.stopped.Load() {
		_ = rc.Close()
		return ErrStopped
	}
	return g.FSM.Restore(rc)
}

type guardBatchingFSM struct {
	*guardFSM
	batch raft.BatchingFSM
}

func (g *guardBatchingFSM) ApplyBatch(logs []*raft.Log) []interface{} {
	n := len(logs)
	for i, l := range logs {
		if !g.check(l) {
			n = i
			break
		}
	}
	out := make([]interface{}, len(logs))
	if n > 0 {
		copy(out, g.batch.ApplyBatch(logs[:n]))
	}
	for i := n; i < len(logs); i++ {
		out[i] = ErrStopped
	}
	return out
}
