package server

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/meta/metapb"
	"github.com/raftq/raftq/raftgroup"
)

// CancelMove records the abort of the move running on a shard, at the meta
// leader (forwarded there): only the leader's view says for sure whether a
// move runs and at which phase. The move executor completes the abort;
// asking again reports aborted once it has.
func (c *clusterSvc) CancelMove(ctx context.Context, req *raftqv1.CancelMoveRequest) (*raftqv1.CancelMoveResponse, error) {
	store := c.node.Meta()
	if !store.IsLeader() {
		_, id := store.Raft().LeaderWithID()
		return forwardToMetaLeader(ctx, c.Server, &raftgroup.NotLeaderError{Group: "meta", LeaderID: string(id)},
			func(ctx context.Context, cc *grpc.ClientConn) (*raftqv1.CancelMoveResponse, error) {
				return raftqv1.NewClusterClient(cc).CancelMove(ctx, req)
			})
	}
	shard := req.GetShard()
	sm := store.ShardMap()
	switch {
	case !sm.Placed():
		return nil, status.Error(codes.Unavailable, "the shard map is not placed yet; retry once the cluster is ready")
	case shard >= sm.Count:
		return nil, invalid("no shard %d: the cluster has %d (0 to %d)", shard, sm.Count, sm.Count-1)
	}
	mv, ok := sm.MoveOf(shard)
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no replica move is running on shard %d", shard)
	}
	resp := &raftqv1.CancelMoveResponse{Shard: shard, From: mv.From, To: mv.To}
	if mv.Phase != metapb.MovePhase_MOVE_PHASE_ADD {
		return nil, status.Errorf(codes.FailedPrecondition,
			"shard %d: the move from %s to %s is past its add phase (%s): %s votes already, so the move can only finish; wait for it",
			shard, mv.From, mv.To, meta.PhaseName(mv.Phase), mv.To)
	}
	err := store.AbortMove(ctx, shard, mv.From, mv.To, false)
	var nl *raftgroup.NotLeaderError
	switch {
	case err == nil:
	case errors.As(err, &nl):
		return forwardToMetaLeader(ctx, c.Server, err, func(ctx context.Context, cc *grpc.ClientConn) (*raftqv1.CancelMoveResponse, error) {
			return raftqv1.NewClusterClient(cc).CancelMove(ctx, req)
		})
	case errors.Is(err, meta.ErrRefused):
		if _, running := store.ShardMap().MoveOf(shard); !running {
			return nil, status.Errorf(codes.NotFound, "no replica move is running on shard %d (it just finished)", shard)
		}
		return nil, status.Error(codes.FailedPrecondition, refusedReason(err))
	case errors.Is(err, meta.ErrInvalid):
		return nil, status.Error(codes.InvalidArgument, refusedReason(err))
	default:
		return nil, c.toStatus(ctx, err)
	}
	_, running := store.ShardMap().MoveOf(shard)
	resp.Aborted = !running
	return resp, nil
}
