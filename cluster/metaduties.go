package cluster

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/raftgroup"
)

// metaDutiesLoop runs on every node and acts while this node leads the meta
// group: it places the shard map once, admits members as nonvoters and
// replaces members that stay dead (deadnodes.go).
func (n *Node) metaDutiesLoop(ctx context.Context) {
	changes, stop := n.meta.Changes()
	defer stop()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-changes:
		case <-n.gossip.events:
		case <-tick.C:
		}
		if n.meta.HasState() {
			n.gossip.announceState()
		}
		if !n.meta.IsLeader() {
			n.dead.reset(0)
			continue
		}
		if !n.meta.ShardMap().Placed() {
			n.placeShards(ctx)
		}
		n.admitMembers(ctx)
		n.recordFormats(ctx)
		n.replaceDeadNodes(ctx)
		n.topUpMetaVoters(ctx)
		n.rebalanceDuty(ctx)
		n.reshardDuty(ctx)
	}
}

func (n *Node) placeShards(ctx context.Context) {
	if n.cfg.Restore != nil {
		n.placeRestored(ctx)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := n.meta.PlaceShards(ctx, n.cfg.Shards, n.cfg.Replication)
	switch {
	case err == nil:
		n.logger.Info("shard map placed", "shards", m.Count, "replicas", m.Replicas)
	case errors.Is(err, meta.ErrAlreadyPlaced):
	default:
		n.logger.Warn("placing shard map", "err", err)
	}
}

// admitMembers adds every member alive for the grace period that the meta
// configuration lacks as a nonvoter, and updates the addresses of servers
// that came back elsewhere. It never removes a server: a gossip failure
// alone says nothing about whether a node is gone for good.
func (n *Node) admitMembers(ctx context.Context) {
	if n.updateAddresses(ctx, n.meta.Raft()) {
		return
	}
	f := n.meta.Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		return
	}
	known := map[raft.ServerID]bool{}
	for _, s := range f.Configuration().Servers {
		known[s.ID] = true
	}
	sm := n.meta.ShardMap()
	for _, m := range n.gossip.alive() {
		if m.NodeID == n.cfg.NodeID || m.RaftAddr == "" || known[raft.ServerID(m.NodeID)] || time.Since(m.aliveSince) < n.cfg.NonvoterGrace {
			continue
		}
		if slices.ContainsFunc(sm.Drains, func(d meta.Drain) bool { return d.Node == m.NodeID }) {
			// Being drained: finishDrain removed it from the configuration
			// and is about to retire it.
			continue
		}
		if sm.IsRetired(m.NodeID) {
			if n.refusedRetired.CompareAndSwap(false, true) {
				n.logger.Warn("meta: a retired node is back; refused: its id was removed for good (start it under a new id with an empty data directory)", "member", m.NodeID)
			}
			continue
		}
		if !n.proves(ctx, m.NodeID, m.RaftAddr) {
			continue
		}
		n.logger.Info("meta: adding nonvoter", "member", m.NodeID, "raft", m.RaftAddr)
		fut := n.meta.Raft().AddNonvoter(raft.ServerID(m.NodeID), raft.ServerAddress(m.RaftAddr), f.Index(), 5*time.Second)
		if err := raftgroup.WaitFuture(ctx, fut, nil); err != nil {
			n.logger.Warn("meta: adding nonvoter", "member", m.NodeID, "err", err)
		}
		// One change per pass: the prevIndex above is stale after it.
		return
	}
}

// placeRestored is placeShards for a cluster built from a backup: the
// backup's queues and a map placed over this cluster's voters arrive in
// one raft step (meta.Store.RestoreBackup), so no shard ever opens
// against a meta state without its queues.
func (n *Node) placeRestored(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	src := n.cfg.Restore
	m, err := n.meta.RestoreBackup(ctx, src.Meta, n.cfg.Replication)
	switch {
	case err == nil:
		n.logger.Info("meta restored from backup; shard map placed", "backup", src.Dir, "backup_cluster", src.Manifest.ClusterID,
			"queues", len(src.Meta.GetQueues()), "shards", m.Count, "replicas", m.Replicas)
	case errors.Is(err, meta.ErrAlreadyPlaced):
	default:
		n.logger.Warn("restoring meta from backup", "backup", src.Dir, "err", err)
	}
}
