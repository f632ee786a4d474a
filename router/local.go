package router

import (
	"context"
	"time"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/peer"
	"github.com/raftq/raftq/peer/peerpb"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/shard"
)

// proposeLocal proposes on a shard this node hosts, recording latency.
// Forwarded calls (Local) use it too, so every proposal a leader makes is
// observed once.
func (r *Router) proposeLocal(ctx context.Context, sh *shard.Shard, cmd *fsmpb.Command) (*fsmpb.Result, error) {
	start := time.Now()
	res, err := sh.Propose(ctx, cmd)
	if r.opts.ObservePropose != nil && err == nil {
		r.opts.ObservePropose(sh.ID(), time.Since(start))
	}
	return res, err
}

// receiveLocal leases, without waiting, from a shard this node leads.
func receiveLocal(ctx context.Context, sh *shard.Shard, rq *fsmpb.Receive) (*fsmpb.Result, error) {
	if !sh.IsLeader() {
		id, addr := sh.Leader()
		return nil, &raftgroup.NotLeaderError{Group: shard.GroupName(sh.ID()), LeaderID: string(id), LeaderAddr: string(addr)}
	}
	return sh.Claim(ctx, rq)
}

// readLocal serves a read on a shard this node leads.
func readLocal(ctx context.Context, sh *shard.Shard, req *peerpb.ShardReadRequest) (*peerpb.ShardReadResponse, error) {
	if err := sh.VerifyLeader(ctx); err != nil {
		return nil, err
	}
	f := sh.FSM()
	resp := &peerpb.ShardReadResponse{}
	switch q := req.GetQuery().(type) {
	case *peerpb.ShardReadRequest_StatsQueue:
		if st, ok := f.Stats(q.StatsQueue); ok {
			resp.Stats = &peerpb.QueueStats{
				Name: q.StatsQueue, Ready: st.Ready, Delayed: st.Delayed, InFlight: st.InFlight,
				Dead: st.Dead, BlockedGroups: st.BlockedGroups, OldestReadyAgeMs: oldestAge(time.Now().UnixMilli(), st.OldestReadyMs),
				LiveBytes: st.LiveBytes, Completed: st.Acked, CompletedBytes: st.ResultBytes, CompletedEvicted: st.Evicted,
				DeadExpired: st.DeadExpired, Retained: st.Retained, Moves: sh.QueueMoves(q.StatsQueue),
			}
		}
	case *peerpb.ShardReadRequest_TenantUsage:
		u := f.TenantUsage(q.TenantUsage)
		resp.TenantUsage = &peerpb.TenantUsage{Queues: uint32(u.Queues), Live: u.Live, LiveBytes: u.LiveBytes, InFlight: u.InFlight}
	case *peerpb.ShardReadRequest_GetMessageId:
		if m, ok := f.Message(q.GetMessageId); ok {
			resp.Message = m
		}
	case *peerpb.ShardReadRequest_ListDeadQueue:
		from, df := req.GetDeadFrom(), req.GetDeadFilter()
		page := f.ListDeadFiltered(q.ListDeadQueue, fsm.DeadCursor{Ms: from.GetMs(), ID: from.GetId()}, fsm.DeadFilter{
			Type: df.GetType(), ErrorContains: df.GetErrorContains(), SinceMs: df.GetDeadSinceMs(), UntilMs: df.GetDeadUntilMs(),
		}, int(req.GetLimit()))
		resp.Dead = page.Messages
		if c := page.ScannedTo; c != nil {
			resp.DeadScannedTo = &peerpb.DeadCursor{Ms: c.Ms, Id: c.ID}
		}
	case *peerpb.ShardReadRequest_DedupLookup:
		ids, err := lookupDedup(f, sh.ID(), q.DedupLookup)
		if err != nil {
			return nil, err
		}
		resp.DedupMessageIds = ids
	}
	return resp, nil
}

// Local is what the peer service serves forwarded calls with: the shard
// replicas this node hosts, reached without forwarding again.
func (r *Router) Local() peer.Shards { return local{r} }

type local struct{ r *Router }

// shard is the local replica of id, or the not-leader error naming the
// leader this node knows of.
func (l local) shard(id uint32) (*shard.Shard, error) {
	if sh := l.r.topo.LocalShard(id); sh != nil {
		return sh, nil
	}
	leader, _, _ := l.r.topo.ShardLeader(id)
	return nil, &raftgroup.NotLeaderError{Group: shard.GroupName(id), LeaderID: leader}
}

func (l local) Ready() error       { return l.r.Ready() }
func (l local) ShardCount() uint32 { return l.r.topo.ShardCount() }

func (l local) Apply(ctx context.Context, id uint32, cmd *fsmpb.Command) (*fsmpb.Result, error) {
	sh, err := l.shard(id)
	if err != nil {
		return nil, err
	}
	return l.r.proposeLocal(ctx, sh, cmd)
}

func (l local) Receive(ctx context.Context, id uint32, rq *fsmpb.Receive) (*fsmpb.Result, error) {
	sh, err := l.shard(id)
	if err != nil {
		return nil, err
	}
	return receiveLocal(ctx, sh, rq)
}

func (l local) Wait(ctx context.Context, id uint32, queue string) error {
	sh, err := l.shard(id)
	if err != nil {
		return err
	}
	return sh.Wait(ctx, queue)
}

func (l local) Read(ctx context.Context, id uint32, req *peerpb.ShardReadRequest) (*peerpb.ShardReadResponse, error) {
	sh, err := l.shard(id)
	if err != nil {
		return nil, err
	}
	return readLocal(ctx, sh, req)
}

func (l local) Digest(id uint32) ([32]byte, uint64, error) {
	sh := l.r.topo.LocalShard(id)
	if sh == nil {
		return [32]byte{}, 0, peer.ErrNoReplica
	}
	return sh.FSM().Digest()
}
