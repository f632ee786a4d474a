package server

import (
	"context"
	"slices"

	"github.com/hashicorp/raft"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
)

// Nodes lists every node this one knows of: gossip members, servers of the
// meta configuration (a dead node stays there until removed), replicas in
// the shard map and retired ids.
func (c *clusterSvc) Nodes(ctx context.Context, _ *raftqv1.NodesRequest) (*raftqv1.NodesResponse, error) {
	if err := c.retired(ctx); err != nil {
		return nil, err
	}
	c.learnLeaders(ctx)
	sm := c.node.Meta().ShardMap()
	byID := map[string]*raftqv1.NodeInfo{}
	get := func(id string) *raftqv1.NodeInfo {
		ni, ok := byID[id]
		if !ok {
			ni = &raftqv1.NodeInfo{NodeId: id, State: "unknown", LogFormat: c.node.Meta().NodeFormat(id)}
			byID[id] = ni
		}
		return ni
	}
	for _, m := range c.node.Members() {
		ni := get(m.NodeID)
		ni.GrpcAddr, ni.PeerAddr, ni.RaftAddr, ni.State, ni.Version = m.GRPCAddr, m.PeerAddr, m.RaftAddr, m.State, m.Version
	}
	if f := c.node.Meta().Raft().GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			ni := get(string(s.ID))
			ni.Meta = "nonvoter"
			if s.Suffrage == raft.Voter {
				ni.Meta = "voter"
			}
			if ni.RaftAddr == "" {
				ni.RaftAddr = string(s.Address)
			}
		}
	}
	for id := uint32(0); id < sm.Count; id++ {
		for _, node := range sm.Replicas[id] {
			ni := get(node)
			ni.Replicas = append(ni.Replicas, id)
		}
		if leader, _, ok := c.node.ShardLeader(id); ok && leader != "" {
			ni := get(leader)
			ni.Leaders = append(ni.Leaders, id)
		}
	}
	for _, id := range sm.Retired {
		get(id)
	}
	resp := &raftqv1.NodesResponse{NodeId: c.node.NodeID()}
	for _, ni := range byID {
		if ni.RaftAddr == "" {
			ni.RaftAddr = sm.RaftAddrs[ni.GetNodeId()]
		}
		drainFlags(sm, ni)
		resp.Nodes = append(resp.Nodes, ni)
	}
	slices.SortFunc(resp.Nodes, func(a, b *raftqv1.NodeInfo) int {
		switch {
		case a.GetNodeId() < b.GetNodeId():
			return -1
		case a.GetNodeId() > b.GetNodeId():
			return 1
		}
		return 0
	})
	return resp, nil
}
