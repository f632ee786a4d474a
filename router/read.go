package router

import (
	"context"
	"fmt"

	"google.golang.org/grpc"

	"github.com/raftq/raftq/peer/peerpb"
	"github.com/raftq/raftq/shard"
)

// Read answers a read-only query at the shard's leader. The leader
// confirms it still leads before answering, so a deposed leader cut off by
// a partition cannot serve a stale message state.
func (r *Router) Read(ctx context.Context, req *peerpb.ShardReadRequest) (*peerpb.ShardReadResponse, error) {
	n, err := r.shards()
	if err != nil {
		return nil, err
	}
	if id := req.GetShardId(); id >= n {
		return nil, fmt.Errorf("shard %d out of range [0,%d)", id, n)
	}
	return call(ctx, r, req.GetShardId(),
		func(ctx context.Context, sh *shard.Shard) (*peerpb.ShardReadResponse, error) {
			return readLocal(ctx, sh, req)
		},
		func(ctx context.Context, c peerpb.PeerClient, opts ...grpc.CallOption) (*peerpb.ShardReadResponse, error) {
			return c.ShardRead(ctx, req, opts...)
		})
}

// oldestAge is judged on the leader's wall clock, not the FSM clock, which
// only moves when entries are applied; a read changes no state, so the
// wall clock is safe here.
func oldestAge(now, oldest int64) int64 {
	if oldest == 0 || now < oldest {
		return 0
	}
	return now - oldest
}
