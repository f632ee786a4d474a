package cluster

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
)

// PeerClient is how a node asks other nodes what only they know: whether
// the cluster lists it (identity checks) and membership changes at a
// group's leader (repair). The default speaks the Node gRPC service to the
// member's advertised address.
type PeerClient interface {
	Known(ctx context.Context, to Member, req *raftqv1.KnownRequest) (*raftqv1.KnownResponse, error)
	// GroupChange returns the leader hint ("" if none) when refused.
	GroupChange(ctx context.Context, to Member, req *raftqv1.GroupChangeRequest) (*raftqv1.GroupChangeResponse, string, error)
	// ShardDigest asks for a replica's state digest (replica comparison).
	ShardDigest(ctx context.Context, to Member, req *raftqv1.ShardDigestRequest) (*raftqv1.ShardDigestResponse, error)
	Close()
}

// leaderTrailer is the trailer a node sets when it refuses a call because
// it does not lead the group: "nodeID=grpcAddr" (router.LeaderTrailer; the
// router imports this package, so the name is repeated here).
const leaderTrailer = "raftq-leader"

// grpcPeers keeps one gRPC connection per member address; forwarding of
// client calls has its own pool in the router.
type grpcPeers struct {
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

func (p *grpcPeers) node(addr string) (raftqv1.NodeClient, error) {
	if addr == "" {
		return nil, fmt.Errorf("member has no gRPC address")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.conns[addr]; ok {
		return raftqv1.NewNodeClient(c), nil
	}
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dial peer %s: %w", addr, err)
	}
	if p.conns == nil {
		p.conns = map[string]*grpc.ClientConn{}
	}
	p.conns[addr] = c
	return raftqv1.NewNodeClient(c), nil
}

func (p *grpcPeers) Known(ctx context.Context, to Member, req *raftqv1.KnownRequest) (*raftqv1.KnownResponse, error) {
	nc, err := p.node(to.GRPCAddr)
	if err != nil {
		return nil, err
	}
	return nc.Known(ctx, req)
}

func (p *grpcPeers) GroupChange(ctx context.Context, to Member, req *raftqv1.GroupChangeRequest) (*raftqv1.GroupChangeResponse, string, error) {
	nc, err := p.node(to.GRPCAddr)
	if err != nil {
		return nil, "", err
	}
	var tr metadata.MD
	resp, err := nc.GroupChange(ctx, req, grpc.Trailer(&tr))
	if err != nil {
		hint := ""
		if v := tr.Get(leaderTrailer); len(v) > 0 {
			hint, _, _ = strings.Cut(v[0], "=")
		}
		return nil, hint, err
	}
	return resp, "", nil
}

func (p *grpcPeers) ShardDigest(ctx context.Context, to Member, req *raftqv1.ShardDigestRequest) (*raftqv1.ShardDigestResponse, error) {
	nc, err := p.node(to.GRPCAddr)
	if err != nil {
		return nil, err
	}
	return nc.ShardDigest(ctx, req)
}

func (p *grpcPeers) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for addr, c := range p.conns {
		_ = c.Close()
		delete(p.conns, addr)
	}
}
