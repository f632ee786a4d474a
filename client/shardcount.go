package client

import (
	"context"
	"fmt"

	"google.golang.org/grpc"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
)

// ShardGrowth is a shard-count change as the meta leader reports it.
type ShardGrowth struct {
	Previous, Count uint32
	Slots           uint32              // the cluster's hash slot count
	NewShards       map[uint32][]string // the new shards' replicas
	Moves           []SlotMove          // running first, then planned
	SlotsPerShard   []uint32            // slots each shard owns, by shard id
}

// SlotMove moves Slots hash slots from shard From to shard To. ID is 0 for
// a planned move; Phase is "planned", "seal", "route" or "done".
type SlotMove struct {
	ID         uint64
	From, To   uint32
	Slots      int
	Phase      string
	HeldGroups int
}

// SetShardCount grows the cluster to count data shards (the moves then run
// on their own; call again with 0 for progress). dryRun only plans. It
// fails with FAILED_PRECONDITION for a smaller count: the shard count only
// grows.
func (c *Client) SetShardCount(ctx context.Context, count uint32, dryRun bool) (ShardGrowth, error) {
	var resp *raftqv1.SetShardCountResponse
	err := c.invoke(ctx, callSpec{shard: anyShard, safe: true}, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) (err error) {
		resp, err = raftqv1.NewClusterClient(cc).SetShardCount(ctx, &raftqv1.SetShardCountRequest{Count: count, DryRun: dryRun}, co...)
		return err
	})
	if err != nil {
		return ShardGrowth{}, fmt.Errorf("set shard count: %w", fromStatus(err))
	}
	g := ShardGrowth{Previous: resp.GetPrevious(), Count: resp.GetCount(), Slots: resp.GetSlots(), SlotsPerShard: resp.GetSlotsPerShard()}
	for _, s := range resp.GetNewShards() {
		if g.NewShards == nil {
			g.NewShards = map[uint32][]string{}
		}
		g.NewShards[s.GetShardId()] = s.GetNodes()
	}
	for _, m := range resp.GetSlotMoves() {
		g.Moves = append(g.Moves, SlotMove{ID: m.GetId(), From: m.GetFrom(), To: m.GetTo(), Slots: int(m.GetSlots()),
			Phase: m.GetPhase(), HeldGroups: int(m.GetHeldGroups())})
	}
	return g, nil
}
