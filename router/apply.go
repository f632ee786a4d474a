package router

import (
	"context"
	"fmt"

	"google.golang.org/grpc"

	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/peer/peerpb"
	"github.com/raftq/raftq/shard"
)

// Apply proposes cmd on shard id through its leader and returns the FSM's
// result. A returned error means the outcome is unknown or certainly
// failed as the error says; FSM-level refusals are in the Result.
// A *NotReadyError means the shard map is not loaded and nothing was
// proposed.
func (r *Router) Apply(ctx context.Context, id uint32, cmd *fsmpb.Command) (*fsmpb.Result, error) {
	n, err := r.shards()
	if err != nil {
		return nil, err
	}
	if id >= n {
		return nil, fmt.Errorf("shard %d out of range [0,%d)", id, n)
	}
	return call(ctx, r, id,
		func(ctx context.Context, sh *shard.Shard) (*fsmpb.Result, error) {
			return r.proposeLocal(ctx, sh, cmd)
		},
		func(ctx context.Context, c peerpb.PeerClient, opts ...grpc.CallOption) (*fsmpb.Result, error) {
			resp, err := c.ShardApply(ctx, &peerpb.ShardApplyRequest{ShardId: id, Command: cmd}, opts...)
			if err != nil {
				return nil, err
			}
			return resp.GetResult(), nil
		})
}

// ApplyAll proposes cmd on every shard in parallel and returns the results
// in shard order; the first error in shard order wins (the others may have
// applied). Without a shard map it fails with a *NotReadyError instead of
// reporting success over no shards.
func (r *Router) ApplyAll(ctx context.Context, cmd *fsmpb.Command) ([]*fsmpb.Result, error) {
	plan, err := r.PlanShards()
	if err != nil {
		return nil, err
	}
	answers := Scatter(ctx, plan, func(ctx context.Context, p Part) (*fsmpb.Result, error) {
		return r.Apply(ctx, p.Shard, cmd)
	})
	results := make([]*fsmpb.Result, len(answers))
	var first error
	for i, a := range answers {
		results[i] = a.Value
		if a.Err != nil && first == nil {
			first = fmt.Errorf("shard %d: %w", a.Shard, a.Err)
		}
	}
	return results, first
}
