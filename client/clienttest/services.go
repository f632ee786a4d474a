package clienttest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

type clusterSvc struct {
	raftqv1.UnimplementedClusterServer
	s *Server
}

func (c *clusterSvc) ShardMap(context.Context, *raftqv1.ShardMapRequest) (*raftqv1.ShardMapResponse, error) {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := &raftqv1.ShardMapResponse{ShardCount: s.shardCount, Version: 1, Slots: s.slots, SlotOwners: slices.Clone(s.slotOwners)}
	for i, l := range s.leaders {
		resp.Shards = append(resp.Shards, &raftqv1.ShardInfo{ShardId: uint32(i), LeaderGrpcAddr: l, LeaderId: l})
	}
	return resp, nil
}

func (c *clusterSvc) Status(ctx context.Context, _ *raftqv1.StatusRequest) (*raftqv1.StatusResponse, error) {
	m, _ := c.ShardMap(ctx, nil)
	return &raftqv1.StatusResponse{
		NodeId:       c.s.NodeID,
		MetaLeaderId: c.s.NodeID,
		Members:      []*raftqv1.Member{{NodeId: c.s.NodeID, GrpcAddr: c.s.Addr, State: "alive"}},
		Shards:       m.GetShards(),
	}, nil
}

type queuesSvc struct {
	raftqv1.UnimplementedQueuesServer
	s *Server
}

func (q *queuesSvc) CreateQueue(_ context.Context, r *raftqv1.CreateQueueRequest) (*raftqv1.QueueInfo, error) {
	if r.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "queue name is empty")
	}
	s := q.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.queues[r.GetName()]; ok {
		if !proto.Equal(old.GetPolicy(), r.GetPolicy()) {
			return nil, status.Errorf(codes.AlreadyExists, "queue %q exists with a different policy", r.GetName())
		}
		return old, nil
	}
	info := &raftqv1.QueueInfo{Name: r.GetName(), Policy: r.GetPolicy(), CreatedMs: time.Now().UnixMilli()}
	s.queues[r.GetName()] = info
	return info, nil
}

func (q *queuesSvc) GetQueue(_ context.Context, r *raftqv1.GetQueueRequest) (*raftqv1.QueueInfo, error) {
	q.s.mu.Lock()
	defer q.s.mu.Unlock()
	return q.s.queue(r.GetName())
}

func (q *queuesSvc) ListQueues(context.Context, *raftqv1.ListQueuesRequest) (*raftqv1.ListQueuesResponse, error) {
	q.s.mu.Lock()
	defer q.s.mu.Unlock()
	resp := &raftqv1.ListQueuesResponse{}
	for _, info := range q.s.queues {
		resp.Queues = append(resp.Queues, info)
	}
	sort.Slice(resp.Queues, func(i, j int) bool { return resp.Queues[i].GetName() < resp.Queues[j].GetName() })
	return resp, nil
}

func (q *queuesSvc) UpdateQueue(_ context.Context, r *raftqv1.UpdateQueueRequest) (*raftqv1.QueueInfo, error) {
	q.s.mu.Lock()
	defer q.s.mu.Unlock()
	info, err := q.s.queue(r.GetName())
	if err != nil {
		return nil, err
	}
	if fifo := raftqv1.QueueMode_QUEUE_MODE_FIFO; (info.GetPolicy().GetMode() == fifo) != (r.GetPolicy().GetMode() == fifo) {
		return nil, status.Errorf(codes.InvalidArgument, "queue %q: a queue's mode cannot change", r.GetName())
	}
	info.Policy = r.GetPolicy()
	return info, nil
}

func (q *queuesSvc) DeleteQueue(_ context.Context, r *raftqv1.DeleteQueueRequest) (*raftqv1.DeleteQueueResponse, error) {
	q.s.mu.Lock()
	defer q.s.mu.Unlock()
	if _, err := q.s.queue(r.GetName()); err != nil {
		return nil, err
	}
	delete(q.s.queues, r.GetName())
	delete(q.s.moves, r.GetName())
	return &raftqv1.DeleteQueueResponse{}, nil
}

func (q *queuesSvc) PurgeQueue(_ context.Context, r *raftqv1.PurgeQueueRequest) (*raftqv1.PurgeQueueResponse, error) {
	s := q.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.queue(r.GetName()); err != nil {
		return nil, err
	}
	var n uint64
	now := time.Now()
	for id, m := range s.msgs {
		if st := s.stateOf(m, now); m.GetQueue() == r.GetName() && (st == raftqv1.State_STATE_READY || st == raftqv1.State_STATE_DELAYED) {
			delete(s.msgs, id)
			n++
		}
	}
	return &raftqv1.PurgeQueueResponse{Purged: n}, nil
}

func (q *queuesSvc) QueueStats(_ context.Context, r *raftqv1.QueueStatsRequest) (*raftqv1.QueueStatsResponse, error) {
	s := q.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.queue(r.GetName()); err != nil {
		return nil, err
	}
	resp := &raftqv1.QueueStatsResponse{Name: r.GetName(), Paused: s.queues[r.GetName()].GetPaused(), Moves: maps.Clone(s.moves[r.GetName()])}
	now := time.Now()
	for _, m := range s.msgs {
		if m.GetQueue() != r.GetName() {
			continue
		}
		switch s.stateOf(m, now) {
		case raftqv1.State_STATE_READY:
			resp.Ready++
			resp.OldestReadyAgeMs = max(resp.OldestReadyAgeMs, now.UnixMilli()-m.GetEnqueuedMs())
		case raftqv1.State_STATE_DELAYED:
			resp.Delayed++
		case raftqv1.State_STATE_LEASED:
			resp.InFlight++
		case raftqv1.State_STATE_DEAD:
			resp.Dead++
		case raftqv1.State_STATE_ACKED:
			resp.Completed++
			resp.CompletedBytes += uint64(len(m.GetResult()))
		}
	}
	return resp, nil
}

// queue looks a queue up; callers hold s.mu.
func (s *Server) queue(name string) (*raftqv1.QueueInfo, error) {
	info, ok := s.queues[name]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "queue %q not found", name)
	}
	return info, nil
}

// stateOf applies lease expiry and due delays lazily; callers hold s.mu.
func (s *Server) stateOf(m *raftqv1.Message, now time.Time) raftqv1.State {
	ms := now.UnixMilli()
	switch {
	case m.State == raftqv1.State_STATE_LEASED && m.LeaseDeadlineMs <= ms:
		m.State, m.AvailableMs = raftqv1.State_STATE_READY, ms
		endAttempt(m, ms, raftqv1.Reason_REASON_EXPIRED, "")
		if limit := s.maxReceives(m); limit > 0 && m.ReceiveCount >= limit {
			m.State, m.DeadReason = raftqv1.State_STATE_DEAD, raftqv1.Reason_REASON_MAX_RECEIVES
		}
	case m.State == raftqv1.State_STATE_DELAYED && m.AvailableMs <= ms:
		m.State = raftqv1.State_STATE_READY
	}
	return m.State
}

// endAttempt closes the current delivery in the history.
func endAttempt(m *raftqv1.Message, ms int64, outcome raftqv1.Reason, errText string) {
	if n := len(m.History); n > 0 && m.History[n-1].LeaseEpoch == m.LeaseEpoch {
		a := m.History[n-1]
		a.EndedMs, a.Outcome, a.Error = ms, outcome, errText
	}
}

// notLeader answers a call for a shard this node does not hold as a
// follower would: UNAVAILABLE with a leader hint when it knows one.
func (s *Server) notLeader(ctx context.Context, shard uint32) error {
	if shard == s.Shard {
		return nil
	}
	if int(shard) < len(s.leaders) && s.leaders[shard] != "" && s.leaders[shard] != s.Addr {
		_ = grpc.SetTrailer(ctx, metadata.Pairs("raftq-leader", "n="+s.leaders[shard]))
		return errorf(codes.Unavailable, "not the leader of shard %d", shard)
	}
	_ = grpc.SetTrailer(ctx, metadata.Pairs("raftq-leader", ""))
	return errorf(codes.Unavailable, "no leader for shard %d", shard)
}

func (s *Server) publicID(id uint64) string { return wire.MessageID{Shard: s.Shard, ID: id}.String() }

// ackedWith reports whether receipt's message was acked with that very
// lease; callers hold s.mu.
func (s *Server) ackedWith(receipt string) bool {
	r, err := wire.ParseReceipt(receipt)
	if err != nil {
		return false
	}
	m, ok := s.msgs[r.ID]
	return ok && m.State == raftqv1.State_STATE_ACKED && m.LeaseEpoch == r.Epoch
}

// lease resolves a receipt to its leased message; callers hold s.mu.
func (s *Server) lease(ctx context.Context, receipt string) (*raftqv1.Message, error) {
	r, err := wire.ParseReceipt(receipt)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := s.notLeader(ctx, r.Shard); err != nil {
		return nil, err
	}
	m, ok := s.msgs[r.ID]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "message %s not found", wire.MessageID{Shard: r.Shard, ID: r.ID})
	}
	if s.stateOf(m, time.Now()) != raftqv1.State_STATE_LEASED || m.LeaseEpoch != r.Epoch {
		return nil, status.Errorf(codes.FailedPrecondition, "stale receipt for message %s: lease epoch %d is not current", s.publicID(r.ID), r.Epoch)
	}
	return m, nil
}

// release ends a lease with outcome: ready after delay, or dead at the max
// receive count; callers hold s.mu.
func (s *Server) release(m *raftqv1.Message, delay time.Duration, outcome raftqv1.Reason, errText string) {
	now := time.Now()
	m.LastError = errText
	endAttempt(m, now.UnixMilli(), outcome, errText)
	limit := s.maxReceives(m)
	if limit == 0 {
		limit = 10
	}
	switch {
	case outcome == raftqv1.Reason_REASON_POISON:
		m.State, m.DeadReason = raftqv1.State_STATE_DEAD, outcome
	case m.ReceiveCount >= limit:
		m.State, m.DeadReason = raftqv1.State_STATE_DEAD, raftqv1.Reason_REASON_MAX_RECEIVES
	case delay > 0:
		m.State, m.AvailableMs = raftqv1.State_STATE_DELAYED, now.Add(delay).UnixMilli()
	default:
		m.State, m.AvailableMs = raftqv1.State_STATE_READY, now.UnixMilli()
	}
	s.notify()
}

// backoff is the fake's nack policy: base * 2^(receives-1), no jitter.
func (s *Server) backoff(m *raftqv1.Message) time.Duration {
	p := s.queues[m.Queue].GetPolicy()
	d := time.Duration(p.GetBackoffBaseMs()) * time.Millisecond
	if d == 0 {
		d = time.Second
	}
	for i := uint32(1); i < m.ReceiveCount; i++ {
		d *= 2
	}
	return d
}

func errorf(code codes.Code, format string, args ...any) error {
	return status.Error(code, fmt.Sprintf(format, args...))
}
