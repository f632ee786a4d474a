package server

import (
	"context"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/router"
)

type clusterSvc struct {
	*Server
	raftqv1.UnimplementedClusterServer
}

func (c *clusterSvc) shards() []*raftqv1.ShardInfo {
	n := c.node.ShardCount()
	out := make([]*raftqv1.ShardInfo, 0, n)
	for id := uint32(0); id < n; id++ {
		si := &raftqv1.ShardInfo{ShardId: id, Replicas: c.node.ShardReplicas(id)}
		if leader, addr, ok := c.node.ShardLeader(id); ok {
			si.LeaderId, si.LeaderGrpcAddr = leader, addr
		}
		if sh := c.node.LocalShard(id); sh != nil {
			info := sh.Info()
			si.Term, si.CommitIndex, si.AppliedIndex = info.Term, info.CommitIndex, info.AppliedIndex
			si.LastSnapshotIndex, si.LastSnapshotTerm = sh.LastSnapshot()
		}
		out = append(out, si)
	}
	return out
}

// retired refuses the cluster views of a node whose id was retired: its
// meta replica is cut off and stale, so what it would list is wrong.
func (c *clusterSvc) retired(ctx context.Context) error {
	if err := router.RetiredError(c.node); err != nil {
		return c.toStatus(ctx, err)
	}
	return nil
}

func (c *clusterSvc) Status(ctx context.Context, _ *raftqv1.StatusRequest) (*raftqv1.StatusResponse, error) {
	if err := c.retired(ctx); err != nil {
		return nil, err
	}
	c.learnLeaders(ctx)
	resp := &raftqv1.StatusResponse{NodeId: c.node.NodeID(), Shards: c.shards(), MetaLeaderId: c.node.Meta().LeaderID(), Damaged: c.damaged()}
	for _, m := range c.node.Members() {
		resp.Members = append(resp.Members, &raftqv1.Member{
			NodeId: m.NodeID, GrpcAddr: m.GRPCAddr, RaftAddr: m.RaftAddr, State: m.State,
			PeerAddr: m.PeerAddr, LogFormat: c.node.Meta().NodeFormat(m.NodeID),
		})
	}
	return resp, nil
}

func (c *clusterSvc) ShardMap(ctx context.Context, _ *raftqv1.ShardMapRequest) (*raftqv1.ShardMapResponse, error) {
	if err := c.retired(ctx); err != nil {
		return nil, err
	}
	sm := c.node.Meta().ShardMap()
	resp := &raftqv1.ShardMapResponse{ShardCount: c.node.ShardCount(), Shards: c.shards(), Version: sm.Version}
	if sm.Placed() {
		// Owners stay empty in the bootstrap layout: 4 bytes a slot that
		// every client can work out from the count.
		t := sm.Table()
		resp.Slots, resp.SlotOwners = t.Slots, t.Owners
	}
	return resp, nil
}
