package peer

import (
	"context"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftq/raftq/peer/peerpb"
)

func (s *Service) BackupPiece(req *peerpb.BackupPieceRequest, stream grpc.ServerStreamingServer[peerpb.BackupChunk]) error {
	ctx := stream.Context()
	if g := req.GetGroup(); g != "meta" {
		rest, ok := strings.CutPrefix(g, "shard-")
		id, err := strconv.ParseUint(rest, 10, 32)
		if !ok || err != nil {
			return status.Errorf(codes.InvalidArgument, "group %q: want meta or shard-N", g)
		}
		if err := s.shard(ctx, uint32(id)); err != nil {
			return err
		}
	}
	if err := s.node.BackupPiece(ctx, req.GetGroup(), stream.Send); err != nil {
		return s.status(ctx, err)
	}
	return nil
}

// PieceStream is one BackupPiece call as its caller reads it.
type PieceStream struct {
	stream grpc.ServerStreamingClient[peerpb.BackupChunk]
}

// Recv returns the next chunk. When the node refused because it does not
// lead the group, hint is the leader it knows ("" if none).
func (p *PieceStream) Recv() (c *peerpb.BackupChunk, hint string, err error) {
	c, err = p.stream.Recv()
	if err != nil {
		if v := p.stream.Trailer().Get(LeaderTrailer); len(v) > 0 {
			hint, _, _ = strings.Cut(v[0], "=")
		}
		return nil, hint, err
	}
	return c, "", nil
}

// BackupPiece asks the node at addr for its piece of a group; read the
// chunks with Recv until one has End set.
func (c *Client) BackupPiece(ctx context.Context, addr string, req *peerpb.BackupPieceRequest) (*PieceStream, error) {
	pc, err := c.peer(addr)
	if err != nil {
		return nil, err
	}
	st, err := pc.BackupPiece(ctx, req)
	if err != nil {
		return nil, err
	}
	return &PieceStream{stream: st}, nil
}
