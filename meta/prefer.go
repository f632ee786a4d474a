package meta

import (
	"context"
	"fmt"
	"slices"

	"github.com/raftq/raftq/meta/metapb"
)

// PreferLeader makes node the preferred leader of shard: first among its
// replicas in the map, which is what a shard leader hands leadership to
// (cluster/handoff.go). Recording it in the map, not deriving it, keeps
// the rebalancer's choice across meta leader changes. Preferring the
// preferred leader succeeds and changes nothing.
func (s *Store) PreferLeader(ctx context.Context, shard uint32, node string) error {
	cmd := &metapb.Command{Cmd: &metapb.Command_PreferLeader{PreferLeader: &metapb.PreferLeader{Shard: shard, NodeId: node}}}
	if _, err := s.apply(ctx, cmd); err != nil {
		return fmt.Errorf("prefer %s to lead shard %d: %w", node, shard, err)
	}
	return nil
}

func (f *FSM) preferLeader(c *metapb.PreferLeader) *metapb.Result {
	if f.shardMap == nil {
		return refusal("no shard map is placed")
	}
	if c.GetNodeId() == "" {
		return &metapb.Result{Code: metapb.Code_CODE_INVALID, Message: "node id required"}
	}
	i := slices.IndexFunc(f.shardMap.GetShards(), func(r *metapb.ShardReplicas) bool { return r.GetShard() == c.GetShard() })
	if i < 0 {
		return &metapb.Result{Code: metapb.Code_CODE_INVALID, Message: fmt.Sprintf("no shard %d", c.GetShard())}
	}
	sr := f.shardMap.GetShards()[i]
	j := slices.Index(sr.GetNodes(), c.GetNodeId())
	switch {
	case j < 0:
		return refusal("node %s is not a voter of shard %d", c.GetNodeId(), c.GetShard())
	case j == 0:
		return &metapb.Result{}
	}
	// Only the order changes: the replica set, and so Changes (which
	// decides whether a fresh replica may bootstrap), stays.
	sr.Nodes = append([]string{c.GetNodeId()}, slices.Delete(sr.Nodes, j, j+1)...)
	f.shardMap.Version++
	return &metapb.Result{}
}
