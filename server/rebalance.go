package server

import (
	"context"
	"errors"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/cluster"
	"github.com/raftq/raftq/raftgroup"
)

// Rebalance answers with the meta leader's balance plan, forwarding the
// call there: only the meta leader knows which nodes it counts as
// eligible, and only it acts.
func (c *clusterSvc) Rebalance(ctx context.Context, req *raftqv1.RebalanceRequest) (*raftqv1.RebalanceResponse, error) {
	if !c.node.Meta().ShardMap().Placed() {
		return nil, status.Error(codes.Unavailable, "the shard map is not placed yet; retry once the cluster is ready")
	}
	st, err := c.node.Rebalance(req.GetDryRun())
	var nl *raftgroup.NotLeaderError
	switch {
	case err == nil:
	case errors.As(err, &nl):
		return forwardToMetaLeader(ctx, c.Server, err, func(ctx context.Context, cc *grpc.ClientConn) (*raftqv1.RebalanceResponse, error) {
			return raftqv1.NewClusterClient(cc).Rebalance(ctx, req)
		})
	case errors.Is(err, cluster.ErrDraining):
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	default:
		return nil, status.Errorf(codes.Unavailable, "rebalance: %v", err)
	}
	return rebalanceResponse(st), nil
}

func rebalanceResponse(st cluster.RebalanceStatus) *raftqv1.RebalanceResponse {
	resp := &raftqv1.RebalanceResponse{Started: st.Started, Moving: st.Moving, Automatic: st.Automatic}
	for _, mv := range slices.Concat(st.Plan.TopUps, st.Plan.Moves) {
		resp.Moves = append(resp.Moves, &raftqv1.ReplicaMovePlan{ShardId: mv.Shard, From: mv.From, To: mv.To})
	}
	for _, lc := range st.Plan.Leaders {
		resp.Leaders = append(resp.Leaders, &raftqv1.LeaderChangePlan{ShardId: lc.Shard, From: lc.From, To: lc.To})
	}
	for _, n := range st.Plan.Nodes {
		resp.Nodes = append(resp.Nodes, &raftqv1.NodeBalance{NodeId: n.Node,
			Replicas: uint32(n.Replicas), ReplicasAfter: uint32(n.ReplicasAfter),
			Leaders: uint32(n.Leaders), LeadersAfter: uint32(n.LeadersAfter)})
	}
	return resp
}
