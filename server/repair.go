package server

import (
	"context"
	"maps"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/raftstore"
)

// Repairer is what a node offers to find and repair damaged replicas
// (docs/operations.md); *cluster.Node implements it.
type Repairer interface {
	Known(nodeID string) *raftqv1.KnownResponse
	ChangeGroup(ctx context.Context, group string, op raftqv1.GroupChangeRequest_Op, nodeID, raftAddr string) (uint64, error)
	Repair(ctx context.Context) []*raftqv1.GroupRepair
	Damaged() map[string]*raftstore.DamageError
	// ShardDigest answers a replica comparison (a checkpoint digest).
	ShardDigest(ctx context.Context, req *raftqv1.ShardDigestRequest) (*raftqv1.ShardDigestResponse, error)
}

func (n *nodeSvc) Known(ctx context.Context, req *raftqv1.KnownRequest) (*raftqv1.KnownResponse, error) {
	if req.GetNodeId() == "" {
		return nil, invalid("node_id is required")
	}
	return n.node.Known(req.GetNodeId()), nil
}

func (n *nodeSvc) GroupChange(ctx context.Context, req *raftqv1.GroupChangeRequest) (*raftqv1.GroupChangeResponse, error) {
	if req.GetGroup() == "" || req.GetNodeId() == "" || req.GetOp() == raftqv1.GroupChangeRequest_OP_UNSPECIFIED {
		return nil, invalid("group, node_id and op are required")
	}
	last, err := n.node.ChangeGroup(ctx, req.GetGroup(), req.GetOp(), req.GetNodeId(), req.GetRaftAddr())
	if err != nil {
		return nil, n.toStatus(ctx, err)
	}
	return &raftqv1.GroupChangeResponse{LeaderId: n.node.NodeID(), LeaderLastIndex: last}, nil
}

func (n *nodeSvc) RepairLocal(ctx context.Context, req *raftqv1.RepairRequest) (*raftqv1.RepairResponse, error) {
	if req.GetNodeId() != n.node.NodeID() {
		return nil, status.Errorf(codes.FailedPrecondition, "this is node %s, not %s", n.node.NodeID(), req.GetNodeId())
	}
	return &raftqv1.RepairResponse{Groups: n.node.Repair(ctx)}, nil
}

// Repair runs on the node named, wherever the call arrives.
func (c *clusterSvc) Repair(ctx context.Context, req *raftqv1.RepairRequest) (*raftqv1.RepairResponse, error) {
	id := req.GetNodeId()
	if id == "" {
		return nil, invalid("node_id is required (the node whose damaged replicas to repair)")
	}
	if id == c.node.NodeID() {
		return &raftqv1.RepairResponse{Groups: c.node.Repair(ctx)}, nil
	}
	addr, ok := c.node.MemberGRPC(id)
	if !ok {
		return nil, status.Errorf(codes.NotFound, "node %s is not a live member (is it running?)", id)
	}
	conn, err := c.router.Conn(addr)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "reach node %s: %v", id, err)
	}
	return raftqv1.NewNodeClient(conn).RepairLocal(ctx, req)
}

func (c *clusterSvc) damaged() []*raftqv1.DamagedReplica {
	d := c.node.Damaged()
	out := make([]*raftqv1.DamagedReplica, 0, len(d))
	for _, g := range slices.Sorted(maps.Keys(d)) {
		out = append(out, &raftqv1.DamagedReplica{Group: g, Reason: d[g].Reason, Detail: d[g].Error()})
	}
	return out
}
