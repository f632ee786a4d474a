package server

import (
	"google.golang.org/grpc"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/cluster"
	"github.com/raftq/raftq/peer/peerpb"
)

// Backup streams a backup gathered from every group's leader by this
// node (cluster.Node.Backup). A failure mid-stream ends the stream with
// its status; the client then has an incomplete backup and discards it.
func (c *clusterSvc) Backup(_ *raftqv1.BackupRequest, stream grpc.ServerStreamingServer[raftqv1.BackupChunk]) error {
	ctx := stream.Context()
	if err := c.ready(ctx); err != nil {
		return err
	}
	info := func(bi cluster.BackupInfo) error {
		return stream.Send(&raftqv1.BackupChunk{ShardCount: bi.ShardCount, ClusterId: bi.ClusterID, NodeId: c.node.NodeID()})
	}
	send := func(ch *peerpb.BackupChunk) error {
		return stream.Send(&raftqv1.BackupChunk{
			Group: ch.GetGroup(), Data: ch.GetData(), End: ch.GetEnd(), Index: ch.GetIndex(),
			Term: ch.GetTerm(), Sha256: ch.GetSha256(), Size: ch.GetSize(),
		})
	}
	if err := c.node.Backup(ctx, info, send); err != nil {
		c.log.Warn("backup failed", "err", err)
		return c.toStatus(ctx, err)
	}
	return nil
}
