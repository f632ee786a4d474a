package meta

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/raftmux"
	"github.com/raftq/raftq/raftstore"
)

// Config opens the meta raft group of one node.
type Config struct {
	NodeID string
	// Dir holds raft.db and snapshots of the meta group.
	Dir string
	// Transport is the "meta" group of the node's raftmux.
	Transport raft.Transport
	// Gate is the raftmux.Gate Transport was built with: Sideline holds
	// this replica's campaigns on it, a replica whose raft writes stall
	// holds all its raft traffic (so a stuck meta leader's followers elect
	// another), and one out of disk space holds its campaigns. Nil:
	// Sideline only refuses writes, stalls and lack of space are only
	// logged.
	Gate   *raftmux.Gate
	Now    func() time.Time
	Logger *slog.Logger
	Tuning raftgroup.RaftTuning
	// Disk says how the meta replica's raft writes are watched
	// (raftgroup.DiskWatch); Disk.OnFatal stops the node on a write error.
	Disk raftgroup.DiskOptions
	// Node is the node's identity (raftstore.OpenNode).
	Node *raftstore.Node
	// Damaged is called if the replica finds damaged bytes while running
	// (raftgroup.RaftOptions.Damaged); the node must stop.
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
	s.disk = raftgroup.NewDiskWatch(raftgroup.DiskWatchConfig{
		Group: "meta", Dir: cfg.Dir, Options: cfg.Disk, Logger: logger, Room: raftgroup.SpaceRoom(cfg.Tuning),
	})
	g, err := raftgroup.OpenRaft(raftgroup.RaftOptions{
		NodeID:    cfg.NodeID,
		Dir:       cfg.Dir,
		Transport: cfg.Transport,
		Logger:    logger,
		Tuning:    cfg.Tuning,
		NotifyCh:  leaderCh,
		Group:     "meta",
		Node:      cfg.Node,
		Damaged:   cfg.Damaged,
		Disk:      s.disk,
	}, f)
	if err != nil {
		_ = s.disk.Close()
		return nil, fmt.Errorf("open meta raft: %w", err)
	}
	s.raft, s.closer, s.replica = g.Raft, g, g.Replica
	r := g.Raft
	hold := func(reason string, h raftmux.Hold) func(bool) {
		return func(on bool) {
			switch {
			case cfg.Gate == nil:
			case on:
				cfg.Gate.Hold(reason, h)
			default:
				cfg.Gate.Release(reason)
			}
		}
	}
	stallHold := hold("log-stall", raftmux.HoldAll)
	// Holding its traffic is what makes the others elect; meanwhile a
	// stalled leader refuses new writes (apply) rather than queue them
	// behind the stuck one, whose caller waits out its own context.
	s.disk.Attach(func(on bool) {
		s.stalled.Store(on)
		stallHold(on)
		if on && r.State() == raft.Leader {
			go raftgroup.NudgeElection(r, cfg.Transport, raft.ServerID(cfg.NodeID), logger)
		}
	}, hold("disk-full", raftmux.HoldCampaign))
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
