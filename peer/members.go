package peer

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/raftq/raftq/peer/peerpb"
)

// Known asks the node at addr which raft groups list a node id.
func (c *Client) Known(ctx context.Context, addr string, req *peerpb.KnownRequest) (*peerpb.KnownResponse, error) {
	pc, err := c.peer(addr)
	if err != nil {
		return nil, err
	}
	return pc.Known(ctx, req)
}

// GroupChange asks the node at addr to change a group's membership. When
// that node refuses because it does not lead the group, hint is the node
// id of the leader it knows ("" if none).
func (c *Client) GroupChange(ctx context.Context, addr string, req *peerpb.GroupChangeRequest) (resp *peerpb.GroupChangeResponse, hint string, err error) {
	pc, err := c.peer(addr)
	if err != nil {
		return nil, "", err
	}
	var tr metadata.MD
	resp, err = pc.GroupChange(ctx, req, grpc.Trailer(&tr))
	if err != nil {
		if v := tr.Get(LeaderTrailer); len(v) > 0 {
			hint, _, _ = strings.Cut(v[0], "=")
		}
		return nil, hint, err
	}
	return resp, "", nil
}

// ShardDigest asks the node at addr for its replica's digest.
func (c *Client) ShardDigest(ctx context.Context, addr string, req *peerpb.ShardDigestRequest) (*peerpb.ShardDigestResponse, error) {
	pc, err := c.peer(addr)
	if err != nil {
		return nil, err
	}
	return pc.ShardDigest(ctx, req)
}

// RepairLocal asks the node at addr to repair its damaged replicas.
func (c *Client) RepairLocal(ctx context.Context, addr string, req *peerpb.RepairLocalRequest) (*peerpb.RepairLocalResponse, error) {
	pc, err := c.peer(addr)
	if err != nil {
		return nil, err
	}
	return pc.RepairLocal(ctx, req)
}

// ReplicaStatus asks the node at addr how far its replica of a group
// applied.
func (c *Client) ReplicaStatus(ctx context.Context, addr string, req *peerpb.ReplicaStatusRequest) (*peerpb.ReplicaStatusResponse, error) {
	pc, err := c.peer(addr)
	if err != nil {
		return nil, err
	}
	return pc.ReplicaStatus(ctx, req)
}
