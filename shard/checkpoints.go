package shard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/raftq/raftq/fsm/fsmpb"
)

// Replica comparison: the leader proposes a Tick carrying a checkpoint id;
// every replica, when it applies that entry, takes a copy-on-write view of
// its state and hashes it in the background (fsm.Options.Checkpoint), so
// all replicas hash the state at the same log index without stopping
// apply. The leader then compares the digests (cluster/digests.go).

// keptCheckpoints is how many recent checkpoint digests a replica keeps.
const keptCheckpoints = 8

// ErrNoCheckpoint: this replica has no digest for that checkpoint: it has
// not applied it yet, or it was evicted.
var ErrNoCheckpoint = errors.New("no digest for this checkpoint on this replica")

type checkpointDigest struct {
	index uint64
	sum   [32]byte
	err   error
	done  chan struct{} // closed when sum/err are set
}

type checkpoints struct {
	mu    sync.Mutex
	byID  map[uint64]*checkpointDigest
	order []uint64 // ids, oldest first
	next  atomic.Uint32
}

// record starts hashing one checkpoint's view; called from the FSM (which
// must not block), so the hash runs in its own goroutine.
func (c *checkpoints) record(id, index uint64, digest func() ([32]byte, error)) {
	d := &checkpointDigest{index: index, done: make(chan struct{})}
	c.mu.Lock()
	if c.byID == nil {
		c.byID = map[uint64]*checkpointDigest{}
	}
	if _, dup := c.byID[id]; dup {
		c.mu.Unlock()
		return
	}
	c.byID[id] = d
	c.order = append(c.order, id)
	for len(c.order) > keptCheckpoints {
		delete(c.byID, c.order[0])
		c.order = c.order[1:]
	}
	c.mu.Unlock()
	go func() {
		d.sum, d.err = digest()
		close(d.done)
	}()
}

func (c *checkpoints) get(id uint64) *checkpointDigest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byID[id]
}

// Checkpoint proposes a replica comparison and returns its id; every
// replica records its digest when it applies it (CheckpointDigest). Only
// the leader proposes.
func (s *Shard) Checkpoint(ctx context.Context) (uint64, error) {
	// Unique per leader term: the term's top bits, then a counter.
	id := s.raft.CurrentTerm()<<32 | uint64(s.checkpoints.next.Add(1))
	_, err := s.Propose(ctx, &fsmpb.Command{Cmd: &fsmpb.Command_Tick{Tick: &fsmpb.Tick{Checkpoint: id}}})
	if err != nil {
		return 0, fmt.Errorf("shard %d: checkpoint: %w", s.cfg.ID, err)
	}
	return id, nil
}

// CheckpointDigest is this replica's digest of its state at checkpoint id
// and the log index it belongs to, waiting for the hash to finish (bounded
// by ctx). ErrNoCheckpoint when the replica has not applied it.
func (s *Shard) CheckpointDigest(ctx context.Context, id uint64) ([32]byte, uint64, error) {
	d := s.checkpoints.get(id)
	if d == nil {
		return [32]byte{}, 0, ErrNoCheckpoint
	}
	select {
	case <-d.done:
		return d.sum, d.index, d.err
	case <-ctx.Done():
		return [32]byte{}, 0, ctx.Err()
	}
}
