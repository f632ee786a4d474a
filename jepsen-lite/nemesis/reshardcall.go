package nemesis

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
)

// SetShardCountVia makes one Cluster.SetShardCount call through the first
// of conns that answers (any node passes it to the meta leader), for the
// backends' Resharder. A refusal another node would give too
// (FAILED_PRECONDITION: shrinking or more shards than slots;
// UNIMPLEMENTED: a node without the call; INVALID_ARGUMENT) wraps
// ErrRefused and is returned at once.
func SetShardCountVia(ctx context.Context, conns []*grpc.ClientConn, names []string, count uint32) (Growth, error) {
	var last error
	for k, cc := range conns {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := raftqv1.NewClusterClient(cc).SetShardCount(cctx, &raftqv1.SetShardCountRequest{Count: count})
		cancel()
		if err == nil {
			return growthOf(resp), nil
		}
		last = fmt.Errorf("set shard count %d via %s: %w", count, names[k], err)
		switch status.Code(err) {
		case codes.FailedPrecondition, codes.Unimplemented, codes.InvalidArgument:
			return Growth{}, fmt.Errorf("%w: %w", ErrRefused, last)
		}
	}
	if last == nil {
		last = errors.New("no member running")
	}
	return Growth{}, last
}

func growthOf(resp *raftqv1.SetShardCountResponse) Growth {
	g := Growth{Count: resp.GetCount()}
	for _, m := range resp.GetSlotMoves() {
		g.Moves = append(g.Moves, SlotMove{ID: m.GetId(), From: m.GetFrom(), To: m.GetTo(), Slots: int(m.GetSlots()), Phase: m.GetPhase()})
	}
	return g
}
