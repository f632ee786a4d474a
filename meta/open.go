package meta

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/raftmux"
	"github.com/raftq/raftq/raftstore"
	"github.com/raftq/raftq/shard"
)

// Config opens the meta raft group of one node.
type Config struct {
	NodeID string
	// Dir holds raft.db and snapshots of the meta group.
	Dir string
	// Transport is the "meta" group of the node's raftmux.
	Transport raft.Transport
	// Gate is the raftmux.Gate Transport was built with, so Sideline can
	// hold this replica's campaigns; nil: Sideline only refuses writes.
	Gate   *raftmux.Gate
	Now    func() time.Time
	Logger *slog.Logger
	Tuning shard.RaftTuning
	// Node is the node's identity (raftstore.OpenNode).
	Node *raftstore.Node
	// Damaged is called if the replica finds damaged bytes while running
	// (shard.RaftOptions.Damaged); the node must stop.
	Damaged func(*raftstore.DamageError)
}

// Open starts the meta group from Dir: a node with state resumes it; a node
// without waits to be bootstrapped (Store.Bootstrap) or added by the leader.
func Open(cfg Config) (*Store, error) {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("group", "meta")
	// The FSM's hook and raft's leadership notifications both land in
	// notify; s is set before raft starts applying.
	var s *Store
	f := NewFSM(func() { s.notify() })
	leaderCh := make(chan bool, 16)
	s = newStore(cfg.NodeID, nil, nil, f, cfg.Now, logger)
	if cfg.Gate != nil {
		s.gate = cfg.Gate
	}
	g, err := shard.OpenRaft(shard.RaftOptions{
		NodeID:    cfg.NodeID,
		Dir:       cfg.Dir,
		Transport: cfg.Transport,
		Logger:    logger,
		Tuning:    cfg.Tuning,
		NotifyCh:  leaderCh,
		Group:     "meta",
		Node:      cfg.Node,
		Damaged:   cfg.Damaged,
	}, f)
	if err != nil {
		return nil, fmt.Errorf("open meta raft: %w", err)
	}
	s.raft, s.closer, s.replica = g.Raft, g, g.Replica
	go func() {
		// Raft blocks on NotifyCh, so this reader never stops before raft
		// does: it exits when Shutdown closes the stopped channel.
		for {
			select {
			case <-leaderCh:
				s.notify()
			case <-s.stopped:
				return
			}
		}
	}()
	return s, nil
}
