package cluster

import (
	"context"

	"google.golang.org/grpc/credentials"

	"github.com/raftq/raftq/internal/liveness"
	"github.com/raftq/raftq/peer"
	"github.com/raftq/raftq/peer/peerpb"
	"github.com/raftq/raftq/tlsconf"
)

// PeerClient is how a node asks other nodes what only they know: whether
// the cluster lists it (identity checks) and membership changes at a
// group's leader (repair). The default speaks the peer protocol
// (peer/peerpb) to the member's advertised peer address.
type PeerClient interface {
	Known(ctx context.Context, to Member, req *peerpb.KnownRequest) (*peerpb.KnownResponse, error)
	// GroupChange returns the leader hint ("" if none) when refused.
	GroupChange(ctx context.Context, to Member, req *peerpb.GroupChangeRequest) (*peerpb.GroupChangeResponse, string, error)
	// ShardDigest asks for a replica's state digest (replica comparison).
	ShardDigest(ctx context.Context, to Member, req *peerpb.ShardDigestRequest) (*peerpb.ShardDigestResponse, error)
	// ReplicaStatus asks how far a member's replica of a group applied.
	ReplicaStatus(ctx context.Context, to Member, req *peerpb.ReplicaStatusRequest) (*peerpb.ReplicaStatusResponse, error)
	// BackupPiece streams a group's backup piece from its leader.
	BackupPiece(ctx context.Context, to Member, req *peerpb.BackupPieceRequest) (*peer.PieceStream, error)
	Close()
}

// peers is the default PeerClient; forwarding of client calls has its own
// connections in the router.
type peers struct{ c *peer.Client }

func newPeers(sec *tlsconf.Store) *peers {
	var creds credentials.TransportCredentials
	if sec != nil {
		creds = sec.PeerCredentials()
	}
	return &peers{c: peer.NewClient(liveness.Config{}, creds)}
}

func (p *peers) Known(ctx context.Context, to Member, req *peerpb.KnownRequest) (*peerpb.KnownResponse, error) {
	return p.c.Known(ctx, to.PeerAddr, req)
}

func (p *peers) GroupChange(ctx context.Context, to Member, req *peerpb.GroupChangeRequest) (*peerpb.GroupChangeResponse, string, error) {
	return p.c.GroupChange(ctx, to.PeerAddr, req)
}

func (p *peers) ShardDigest(ctx context.Context, to Member, req *peerpb.ShardDigestRequest) (*peerpb.ShardDigestResponse, error) {
	return p.c.ShardDigest(ctx, to.PeerAddr, req)
}

func (p *peers) ReplicaStatus(ctx context.Context, to Member, req *peerpb.ReplicaStatusRequest) (*peerpb.ReplicaStatusResponse, error) {
	return p.c.ReplicaStatus(ctx, to.PeerAddr, req)
}

func (p *peers) Close() { _ = p.c.Close() }

func (p *peers) BackupPiece(ctx context.Context, to Member, req *peerpb.BackupPieceRequest) (*peer.PieceStream, error) {
	return p.c.BackupPiece(ctx, to.PeerAddr, req)
}
