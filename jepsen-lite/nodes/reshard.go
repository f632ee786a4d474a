package nodes

import (
	"context"

	"google.golang.org/grpc"

	"github.com/raftq/raftq/jepsen-lite/nemesis"
)

// SetShardCount asks for (count > 0) or reports (0) the growth of the
// shard count (Cluster.SetShardCount) through the running members in
// turn, for the reshard nemesis.
func (c *Cluster) SetShardCount(ctx context.Context, count uint32) (nemesis.Growth, error) {
	var conns []*grpc.ClientConn
	var names []string
	for _, i := range c.Members() {
		if c.Running(i) {
			conns, names = append(conns, c.conns[i]), append(names, c.Nodes[i].ID)
		}
	}
	return nemesis.SetShardCountVia(ctx, conns, names, count)
}

var _ nemesis.Resharder = (*Cluster)(nil)
