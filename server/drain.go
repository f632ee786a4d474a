package server

import (
	"context"
	"errors"
	"slices"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/raftgroup"
)

// minMetaVoters is the fewest meta voters RemoveNode leaves: with fewer,
// one more loss stops the control plane.
const minMetaVoters = 3

func (c *clusterSvc) RemoveNode(ctx context.Context, req *raftqv1.RemoveNodeRequest) (*raftqv1.NodeDrainResponse, error) {
	return c.drain(ctx, req.GetNodeId(), "", func(ctx context.Context, cc raftqv1.ClusterClient) (*raftqv1.NodeDrainResponse, error) {
		return cc.RemoveNode(ctx, req)
	})
}

func (c *clusterSvc) ReplaceNode(ctx context.Context, req *raftqv1.ReplaceNodeRequest) (*raftqv1.NodeDrainResponse, error) {
	if req.GetNewNodeId() == "" {
		return nil, invalid("new_node_id is required (the member that takes the old node's replicas)")
	}
	return c.drain(ctx, req.GetOldNodeId(), req.GetNewNodeId(), func(ctx context.Context, cc raftqv1.ClusterClient) (*raftqv1.NodeDrainResponse, error) {
		return cc.ReplaceNode(ctx, req)
	})
}

// drain checks the request against this node's view, records the drain
// through the meta leader (forwarding the call there if need be) and
// reports its progress. Recording a drain already recorded changes
// nothing, so the call is safe to repeat.
func (c *clusterSvc) drain(ctx context.Context, id, to string, forward func(context.Context, raftqv1.ClusterClient) (*raftqv1.NodeDrainResponse, error)) (*raftqv1.NodeDrainResponse, error) {
	if id == "" {
		return nil, invalid("node_id is required (the node to remove)")
	}
	if id == to {
		return nil, invalid("the old and the new node are both %s", id)
	}
	sm := c.node.Meta().ShardMap()
	if !sm.Placed() {
		return nil, status.Error(codes.Unavailable, "the shard map is not placed yet; retry once the cluster is ready")
	}
	if sm.IsRetired(id) {
		return &raftqv1.NodeDrainResponse{NodeId: id, To: to, Done: true}, nil
	}
	f := c.node.Meta().Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, status.Errorf(codes.Unavailable, "meta configuration: %v", err)
	}
	servers := map[string]raft.ServerSuffrage{}
	for _, s := range f.Configuration().Servers {
		servers[string(s.ID)] = s.Suffrage
	}
	if _, ok := servers[c.node.NodeID()]; !ok {
		// Removed from meta (drained itself): its view no longer moves.
		return nil, status.Errorf(codes.Unavailable, "node %s is not in the meta group (removed?); ask another node", c.node.NodeID())
	}
	draining := slices.ContainsFunc(sm.Drains, func(d meta.Drain) bool { return d.Node == id })
	if _, ok := servers[id]; !ok && len(sm.ShardsOf(id)) == 0 && !draining {
		return nil, status.Errorf(codes.NotFound, "unknown node %s: neither meta nor any shard lists it", id)
	}
	// A drain already recorded is under way: repeating the call (the
	// CLI's --wait does) reports its progress. Checked again, it could be
	// refused for what it did itself, e.g. the spare it is moving onto
	// now holds the shard.
	if !draining {
		if err := c.canDrain(sm, servers, id, to); err != nil {
			return nil, err
		}
	}
	err := c.node.Meta().DrainNode(ctx, id, to)
	var nl *raftgroup.NotLeaderError
	switch {
	case err == nil:
	case errors.As(err, &nl):
		return forwardToMetaLeader(ctx, c.Server, err, func(ctx context.Context, cc *grpc.ClientConn) (*raftqv1.NodeDrainResponse, error) {
			return forward(ctx, raftqv1.NewClusterClient(cc))
		})
	case errors.Is(err, meta.ErrRefused):
		return nil, status.Error(codes.FailedPrecondition, refusedReason(err))
	case errors.Is(err, meta.ErrInvalid):
		return nil, status.Error(codes.InvalidArgument, refusedReason(err))
	default:
		return nil, c.toStatus(ctx, err)
	}
	return drainProgress(c.node.Meta().ShardMap(), id, to), nil
}

// canDrain refuses a drain the cluster cannot spare: to must be a live
// member of meta; without to, the meta group keeps minMetaVoters voters
// and every shard of the node has another node to go to.
func (c *clusterSvc) canDrain(sm meta.ShardMap, servers map[string]raft.ServerSuffrage, id, to string) error {
	alive := map[string]bool{}
	for _, m := range c.node.Members() {
		alive[m.NodeID] = m.State == "alive"
	}
	if to != "" {
		if _, ok := servers[to]; !ok || !alive[to] {
			return status.Errorf(codes.FailedPrecondition, "node %s is not a live member of the cluster: start it with --join and --bootstrap-expect 0 and wait until `raftq cluster nodes` lists it as alive", to)
		}
		if sm.IsRetired(to) {
			return status.Errorf(codes.FailedPrecondition, "node %s is retired", to)
		}
		return nil
	}
	if left, short := leavesTooFewVoters(servers, id); short {
		return status.Errorf(codes.FailedPrecondition,
			"removing %s would leave the meta group %d voter(s); raftq keeps at least %d: replace it instead (raftq cluster replace-node %s NEW)",
			id, left, minMetaVoters, id)
	}
	for _, shard := range sm.ShardsOf(id) {
		if !hasSpare(sm, servers, alive, id, shard) {
			return status.Errorf(codes.FailedPrecondition,
				"no live node can take %s's replica of shard %d: every other live meta member holds it; add a node first", id, shard)
		}
	}
	return nil
}

// hasSpare reports whether a node other than id can take id's replica of
// shard: alive, not retired, not being drained itself, not holding the
// shard, and a meta member, as the drain's targets must be
// (cluster/drain.go): a node gossip knows but meta never admitted would
// leave the drain recorded and waiting.
func hasSpare(sm meta.ShardMap, servers map[string]raft.ServerSuffrage, alive map[string]bool, id string, shard uint32) bool {
	for node, up := range alive {
		_, member := servers[node]
		draining := slices.ContainsFunc(sm.Drains, func(d meta.Drain) bool { return d.Node == node })
		if up && member && !draining && node != id && !sm.Hosts(shard, node) && !sm.IsRetired(node) {
			return true
		}
	}
	return false
}

// leavesTooFewVoters reports whether removing id from the meta
// configuration servers would leave fewer than minMetaVoters voters, and
// how many it would leave. An id the configuration no longer lists
// removes nothing: a drain's last step takes the node out of the
// configuration (applied as raft appends it) a moment before the shard map
// that marks it retired is applied, and a repeated remove-node asked in
// between must report progress, not a refusal (raft.Voter is the
// suffrage's zero value, so a missing id must not be read as one).
func leavesTooFewVoters(servers map[string]raft.ServerSuffrage, id string) (left int, short bool) {
	voters := 0
	for _, s := range servers {
		if s == raft.Voter {
			voters++
		}
	}
	if s, ok := servers[id]; !ok || s != raft.Voter {
		return voters, false
	}
	return voters - 1, voters-1 < minMetaVoters
}

func drainProgress(sm meta.ShardMap, id, to string) *raftqv1.NodeDrainResponse {
	resp := &raftqv1.NodeDrainResponse{NodeId: id, To: to, Done: sm.IsRetired(id), Replicas: sm.ShardsOf(id)}
	for _, mv := range sm.Moves {
		resp.Moving = mv.String()
	}
	return resp
}

func refusedReason(err error) string {
	var re *meta.RefusedError
	if errors.As(err, &re) {
		return re.Reason
	}
	return err.Error()
}

// drainFlags marks the nodes being drained and the retired ones in a
// Nodes answer.
func drainFlags(sm meta.ShardMap, ni *raftqv1.NodeInfo) {
	ni.Retired = sm.IsRetired(ni.GetNodeId())
	ni.Draining = slices.ContainsFunc(sm.Drains, func(d meta.Drain) bool { return d.Node == ni.GetNodeId() })
}
