package server

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/cluster"
	"github.com/raftq/raftq/raftgroup"
)

// SetShardCount grows the shard count at the meta leader, forwarding the
// call there: only it plans placements and runs slot moves.
func (c *clusterSvc) SetShardCount(ctx context.Context, req *raftqv1.SetShardCountRequest) (*raftqv1.SetShardCountResponse, error) {
	if !c.node.Meta().ShardMap().Placed() {
		return nil, status.Error(codes.Unavailable, "the shard map is not placed yet; retry once the cluster is ready")
	}
	st, err := c.node.SetShardCount(ctx, req.GetCount(), req.GetDryRun())
	var nl *raftgroup.NotLeaderError
	switch {
	case err == nil:
	case errors.As(err, &nl):
		return forwardToMetaLeader(ctx, c.Server, err, func(ctx context.Context, cc *grpc.ClientConn) (*raftqv1.SetShardCountResponse, error) {
			return raftqv1.NewClusterClient(cc).SetShardCount(ctx, req)
		})
	case errors.Is(err, cluster.ErrShrink), errors.Is(err, cluster.ErrTooManyShards):
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	default:
		return nil, status.Errorf(codes.Unavailable, "set shard count: %v", err)
	}
	resp := &raftqv1.SetShardCountResponse{Previous: st.Previous, Count: st.Count, Slots: st.Slots, SlotsPerShard: st.SlotsPerShard}
	for id := st.Previous; id < st.Previous+uint32(len(st.NewShards)); id++ {
		resp.NewShards = append(resp.NewShards, &raftqv1.ReplicaPlacement{ShardId: id, Nodes: st.NewShards[id]})
	}
	for _, mv := range st.Moves {
		resp.SlotMoves = append(resp.SlotMoves, &raftqv1.SlotMoveInfo{Id: mv.ID, From: mv.From, To: mv.To,
			Slots: uint32(mv.Slots), Phase: mv.Phase, HeldGroups: uint32(mv.HeldGroups)})
	}
	return resp, nil
}
