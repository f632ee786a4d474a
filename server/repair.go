package server

import (
	"context"
	"maps"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/peer"
	"github.com/raftq/raftq/peer/peerpb"
	"github.com/raftq/raftq/raftstore"
)

// Repairer is what a node offers to find and repair damaged replicas
// (docs/operations.md); *cluster.Node implements it. The peer service
// (package peer) serves the rest of it to other nodes.
type Repairer interface {
	peer.Node
	Damaged() map[string]*raftstore.DamageError
}

// Repair runs on the node named, wherever the call arrives.
func (c *clusterSvc) Repair(ctx context.Context, req *raftqv1.RepairRequest) (*raftqv1.RepairResponse, error) {
	id := req.GetNodeId()
	if id == "" {
		return nil, invalid("node_id is required (the node whose damaged replicas to repair)")
	}
	if id == c.node.NodeID() {
		return &raftqv1.RepairResponse{Groups: groupRepairs(c.node.Repair(ctx))}, nil
	}
	addr, ok := c.node.MemberPeer(id)
	if !ok {
		return nil, status.Errorf(codes.NotFound, "node %s is not a live member (is it running?)", id)
	}
	resp, err := c.router.Peers().RepairLocal(ctx, addr, &peerpb.RepairLocalRequest{NodeId: id})
	if err != nil {
		if _, ok := status.FromError(err); ok {
			return nil, err
		}
		return nil, status.Errorf(codes.Unavailable, "reach node %s: %v", id, err)
	}
	return &raftqv1.RepairResponse{Groups: groupRepairs(resp.GetGroups())}, nil
}

func groupRepairs(in []*peerpb.GroupRepair) []*raftqv1.GroupRepair {
	out := make([]*raftqv1.GroupRepair, 0, len(in))
	for _, g := range in {
		out = append(out, &raftqv1.GroupRepair{Group: g.GetGroup(), Reason: g.GetReason(), Outcome: g.GetOutcome()})
	}
	return out
}

func (c *clusterSvc) damaged() []*raftqv1.DamagedReplica {
	d := c.node.Damaged()
	out := make([]*raftqv1.DamagedReplica, 0, len(d))
	for _, g := range slices.Sorted(maps.Keys(d)) {
		out = append(out, &raftqv1.DamagedReplica{Group: g, Reason: d[g].Reason, Detail: d[g].Error()})
	}
	return out
}
