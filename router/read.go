package router

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/shard"
)

// Read answers a read-only query at the shard's leader. The leader
// confirms it still leads before answering, so a deposed leader cut off by
// a partition cannot serve a stale message state.
func (r *Router) Read(ctx context.Context, req *raftqv1.ShardReadRequest) (*raftqv1.ShardReadResponse, error) {
	n, err := r.shards()
	if err != nil {
		return nil, err
	}
	if id := req.GetShardId(); id >= n {
		return nil, fmt.Errorf("shard %d out of range [0,%d)", id, n)
	}
	return call(ctx, r, req.GetShardId(),
		func(ctx context.Context, sh *shard.Shard) (*raftqv1.ShardReadResponse, error) {
			return ReadLocal(ctx, sh, req)
		},
		func(ctx context.Context, c raftqv1.NodeClient, opts ...grpc.CallOption) (*raftqv1.ShardReadResponse, error) {
			return c.ShardRead(ctx, req, opts...)
		})
}

// ReadLocal serves a read on a shard this node leads.
func ReadLocal(ctx context.Context, sh *shard.Shard, req *raftqv1.ShardReadRequest) (*raftqv1.ShardReadResponse, error) {
	if err := sh.VerifyLeader(ctx); err != nil {
		return nil, err
	}
	f := sh.FSM()
	resp := &raftqv1.ShardReadResponse{}
	switch q := req.GetQuery().(type) {
	case *raftqv1.ShardReadRequest_StatsQueue:
		if st, ok := f.Stats(q.StatsQueue); ok {
			resp.Stats = &raftqv1.QueueStatsResponse{
				Name: q.StatsQueue, Ready: st.Ready, Delayed: st.Delayed, InFlight: st.InFlight,
				Dead: st.Dead, BlockedGroups: st.BlockedGroups, OldestReadyAgeMs: oldestAge(time.Now().UnixMilli(), st.OldestReadyMs),
			}
		}
	case *raftqv1.ShardReadRequest_GetMessageId:
		if m, ok := f.Message(q.GetMessageId); ok {
			resp.Message = m
		}
	case *raftqv1.ShardReadRequest_ListDeadQueue:
		resp.Dead = f.ListDead(q.ListDeadQueue, int(req.GetLimit()))
	}
	return resp, nil
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
