package compose

import (
	"context"

	"github.com/raftq/raftq/jepsen-lite/nemesis"
)

// SetShardCount asks for (count > 0) or reports (0) the growth of the
// shard count (Cluster.SetShardCount) through the nodes in turn, for the
// reshard nemesis.
func (c *Cluster) SetShardCount(ctx context.Context, count uint32) (nemesis.Growth, error) {
	names := make([]string, Nodes)
	for i := range names {
		names[i] = service(i)
	}
	return nemesis.SetShardCountVia(ctx, c.conns, names, count)
}

// MetaLeader is the slot of the meta leader as the first node that
// answers sees it, or -1.
func (c *Cluster) MetaLeader(ctx context.Context) int {
	for i := range Nodes {
		st, err := c.Status(ctx, i)
		if err != nil || st.GetMetaLeaderId() == "" {
			continue
		}
		return c.Index(st.GetMetaLeaderId())
	}
	return -1
}

var _ nemesis.Resharder = (*Cluster)(nil)
