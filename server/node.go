package server

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/router"
	"github.com/raftq/raftq/shard"
)

// nodeSvc serves forwarded shard calls. It never forwards again: a node
// that does not lead the shard refuses with a leader hint and the caller
// follows it, so a call cannot loop.
type nodeSvc struct {
	*Server
	raftqv1.UnimplementedNodeServer
}

// local finds the local replica of a forwarded call's shard. A node that
// has not loaded the shard map refuses as not ready (UNAVAILABLE, certainly
// not applied), never INVALID_ARGUMENT: the id is valid, this node just
// cannot know it yet, and the forwarding node then asks another replica.
func (n *nodeSvc) local(ctx context.Context, id uint32) (*shard.Shard, error) {
	if err := n.ready(ctx); err != nil {
		return nil, err
	}
	if id >= n.node.ShardCount() {
		return nil, status.Errorf(codes.InvalidArgument, "shard %d out of range", id)
	}
	sh := n.node.LocalShard(id)
	if sh == nil {
		leader, _, _ := n.node.ShardLeader(id)
		return nil, n.toStatus(ctx, &raftgroup.NotLeaderError{LeaderID: leader})
	}
	return sh, nil
}

func (n *nodeSvc) ShardApply(ctx context.Context, req *raftqv1.ShardApplyRequest) (*raftqv1.ShardApplyResponse, error) {
	sh, err := n.local(ctx, req.GetShardId())
	if err != nil {
		return nil, err
	}
	if req.GetCommand() == nil || req.GetCommand().GetCmd() == nil {
		return nil, invalid("empty command")
	}
	res, err := n.router.ProposeLocal(ctx, sh, req.GetCommand())
	if err != nil {
		return nil, n.toStatus(ctx, err)
	}
	return &raftqv1.ShardApplyResponse{Result: res}, nil
}

func (n *nodeSvc) ShardReceive(ctx context.Context, req *raftqv1.ShardReceiveRequest) (*raftqv1.ShardApplyResponse, error) {
	sh, err := n.local(ctx, req.GetShardId())
	if err != nil {
		return nil, err
	}
	if err := msWithin("wait_ms", req.GetWaitMs(), maxWait.Milliseconds()); err != nil {
		return nil, err
	}
	wait := time.Duration(req.GetWaitMs()) * time.Millisecond
	res, err := router.ReceiveLocal(ctx, sh, req.GetReceive(), wait)
	if err != nil {
		return nil, n.toStatus(ctx, err)
	}
	return &raftqv1.ShardApplyResponse{Result: res}, nil
}

func (n *nodeSvc) ShardRead(ctx context.Context, req *raftqv1.ShardReadRequest) (*raftqv1.ShardReadResponse, error) {
	sh, err := n.local(ctx, req.GetShardId())
	if err != nil {
		return nil, err
	}
	resp, err := router.ReadLocal(ctx, sh, req)
	if err != nil {
		return nil, n.toStatus(ctx, err)
	}
	return resp, nil
}

func (n *nodeSvc) ShardDigest(ctx context.Context, req *raftqv1.ShardDigestRequest) (*raftqv1.ShardDigestResponse, error) {
	if err := n.ready(ctx); err != nil {
		return nil, err
	}
	if req.GetShardId() >= n.node.ShardCount() {
		return nil, status.Errorf(codes.InvalidArgument, "shard %d out of range", req.GetShardId())
	}
	sh := n.node.LocalShard(req.GetShardId())
	if sh == nil {
		return nil, status.Errorf(codes.NotFound, "node %s holds no replica of shard %d", n.node.NodeID(), req.GetShardId())
	}
	if req.GetCheckpoint() != 0 {
		resp, err := n.node.ShardDigest(ctx, req)
		if errors.Is(err, shard.ErrNoCheckpoint) {
			return nil, status.Errorf(codes.NotFound, "shard %d on %s: %v", req.GetShardId(), n.node.NodeID(), err)
		}
		if err != nil {
			return nil, n.toStatus(ctx, err)
		}
		return resp, nil
	}
	sum, index, err := sh.FSM().Digest()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "digest of shard %d: %v", req.GetShardId(), err)
	}
	return &raftqv1.ShardDigestResponse{NodeId: n.node.NodeID(), AppliedIndex: index, Digest: sum[:]}, nil
}
