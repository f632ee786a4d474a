package server

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/peer/peerpb"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/router"
)

type queues struct {
	*Server
	raftqv1.UnimplementedQueuesServer
}

// forwardedKey marks a control-plane call forwarded to the meta leader, so
// a node that lost leadership meanwhile refuses instead of bouncing it on.
const forwardedKey = "raftq-forwarded"

// forwardMeta sends a Queues write to the meta leader.
func forwardMeta[T any](ctx context.Context, s *Server, err error, fn func(context.Context, raftqv1.QueuesClient) (T, error)) (T, error) {
	return forwardToMetaLeader(ctx, s, err, func(ctx context.Context, cc *grpc.ClientConn) (T, error) {
		return fn(ctx, raftqv1.NewQueuesClient(cc))
	})
}

// forwardToMetaLeader sends a control-plane write that this node refused
// with err to the meta leader err names, once: a call that was already
// forwarded, or a leader this node cannot name or dial, is answered with
// err's status.
func forwardToMetaLeader[T any](ctx context.Context, s *Server, err error, fn func(context.Context, *grpc.ClientConn) (T, error)) (T, error) {
	var zero T
	var nl *raftgroup.NotLeaderError
	if !errors.As(err, &nl) {
		return zero, s.toStatus(ctx, err)
	}
	if md, _ := metadata.FromIncomingContext(ctx); len(md.Get(forwardedKey)) > 0 || nl.LeaderID == "" {
		return zero, s.toStatus(ctx, err)
	}
	addr, ok := s.node.MemberGRPC(nl.LeaderID)
	if !ok {
		return zero, s.toStatus(ctx, err)
	}
	conn, cerr := s.router.Conn(addr)
	if cerr != nil {
		return zero, status.Errorf(codes.Unavailable, "forward to meta leader %s: %v", nl.LeaderID, cerr)
	}
	return fn(metadata.AppendToOutgoingContext(ctx, forwardedKey, s.node.NodeID(), onBehalfKey, callerName(ctx)), conn)
}

// upsertCmd makes a shard hold q with its share of the quotas
// (meta.Store.ShardPolicy), as the shards' reconciliation would.
func (s *Server) upsertCmd(q meta.Queue) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_UpsertQueue{UpsertQueue: &fsmpb.UpsertQueue{Queue: q.Name, Policy: s.node.Meta().ShardPolicy(q)}}}
}

func validateQueue(name string, p *fsmpb.QueuePolicy) error {
	if err := fsm.ValidateQueueName(name); err != nil {
		return invalidFSM(err)
	}
	if p == nil {
		return nil
	}
	if err := fsm.ValidatePolicy(p); err != nil {
		return invalidFSM(err)
	}
	return nil
}

// invalidFSM is an fsm validation error as INVALID_ARGUMENT, without the
// words "invalid argument", which the code already says.
func invalidFSM(err error) error {
	return status.Error(codes.InvalidArgument, strings.TrimPrefix(err.Error(), fsm.ErrInvalidArgument.Error()+": "))
}

func (q *queues) CreateQueue(ctx context.Context, req *raftqv1.CreateQueueRequest) (*raftqv1.QueueInfo, error) {
	policy := policyToFSM(req.GetPolicy())
	if err := validateQueue(req.GetName(), policy); err != nil {
		return nil, err
	}
	if t := policy.GetSubscriptionOf(); t != "" {
		// A subscription receives everything published to its topic: its
		// creator must be allowed to consume the topic, beyond managing
		// the new queue.
		if err := allowed(ctx, "/raftq.v1.Queues/CreateQueue", permConsume, t); err != nil {
			return nil, err
		}
	}
	if policy == nil {
		policy = &fsmpb.QueuePolicy{}
	}
	mq, err := q.node.Meta().CreateQueue(ctx, req.GetName(), policy)
	if err != nil {
		return forwardMeta(ctx, q.Server, err, func(ctx context.Context, c raftqv1.QueuesClient) (*raftqv1.QueueInfo, error) {
			return c.CreateQueue(ctx, req)
		})
	}
	// Make the queue usable on every shard before answering; the shard
	// leaders' reconciliation is the safety net if this is cut short.
	if _, err := q.router.ApplyAll(ctx, q.upsertCmd(mq)); err != nil {
		return nil, status.Errorf(codes.Unavailable, "queue %q recorded, shards not all ready yet (retry is safe): %v", req.GetName(), err)
	}
	return queueInfo(mq), nil
}

func (q *queues) GetQueue(ctx context.Context, req *raftqv1.GetQueueRequest) (*raftqv1.QueueInfo, error) {
	return q.lookupQueue(ctx, req.GetName())
}

// lookupQueue finds a queue as GetQueue answers it: NOT_FOUND only when
// the meta leader (or, if it cannot be asked, a replica that is not
// starting) does not know it.
func (s *Server) lookupQueue(ctx context.Context, name string) (*raftqv1.QueueInfo, error) {
	if err := validateQueue(name, nil); err != nil {
		return nil, err
	}
	if mq, ok := s.node.Meta().Queue(name); ok {
		return queueInfo(mq), nil
	}
	notFound := status.Errorf(codes.NotFound, "queue %q not found", name)
	if s.node.Meta().IsLeader() {
		return nil, notFound
	}
	// A follower applies a meta entry only once the leader tells it the
	// entry committed (its next append, up to a commit timeout later), so a
	// queue created a moment ago, even through this node, may not be here
	// yet. Only the leader may say a queue does not exist; if it cannot be
	// asked, this replica's answer stands, unless the replica is still
	// starting (no shard map yet): its meta state is then known to lag, and
	// NOT_FOUND, which clients take as final, would be a guess.
	info, err := forwardMeta(ctx, s, &raftgroup.NotLeaderError{Group: "meta", LeaderID: s.node.Meta().LeaderID()},
		func(ctx context.Context, c raftqv1.QueuesClient) (*raftqv1.QueueInfo, error) {
			return c.GetQueue(ctx, &raftqv1.GetQueueRequest{Name: name})
		})
	if err != nil {
		if rerr := s.ready(ctx); rerr != nil {
			return nil, rerr
		}
		return nil, notFound
	}
	return info, nil
}

// maxQueuesPage is ListQueues' default and largest page.
const maxQueuesPage = 1000

func (q *queues) ListQueues(ctx context.Context, req *raftqv1.ListQueuesRequest) (*raftqv1.ListQueuesResponse, error) {
	size := int(req.GetPageSize())
	switch {
	case size == 0:
		size = maxQueuesPage
	case size > maxQueuesPage:
		return nil, invalid("page_size %d above %d", size, maxQueuesPage)
	}
	after := ""
	if t := req.GetPageToken(); t != "" {
		name, err := parseQueuesToken(t)
		if err != nil {
			return nil, err
		}
		after = name
	}
	mqs := q.node.Meta().Queues() // by name
	resp := &raftqv1.ListQueuesResponse{}
	p := principalOf(ctx)
	for _, mq := range mqs {
		if mq.Name <= after && after != "" {
			continue
		}
		// A principal sees the queues it holds a role on.
		if p != nil && !p.Allows(permRead, mq.Name) {
			continue
		}
		if len(resp.Queues) == size {
			resp.NextPageToken = queuesToken(resp.Queues[size-1].GetName())
			break
		}
		resp.Queues = append(resp.Queues, queueInfo(mq))
	}
	return resp, nil
}

func (q *queues) UpdateQueue(ctx context.Context, req *raftqv1.UpdateQueueRequest) (*raftqv1.QueueInfo, error) {
	policy := policyToFSM(req.GetPolicy())
	if err := validateQueue(req.GetName(), policy); err != nil {
		return nil, err
	}
	if policy == nil {
		return nil, invalid("policy is required")
	}
	mq, err := q.node.Meta().UpdateQueue(ctx, req.GetName(), policy)
	if err != nil {
		return forwardMeta(ctx, q.Server, err, func(ctx context.Context, c raftqv1.QueuesClient) (*raftqv1.QueueInfo, error) {
			return c.UpdateQueue(ctx, req)
		})
	}
	if _, err := q.router.ApplyAll(ctx, q.upsertCmd(mq)); err != nil {
		return nil, status.Errorf(codes.Unavailable, "queue %q updated, shards not all updated yet (retry is safe): %v", req.GetName(), err)
	}
	return queueInfo(mq), nil
}

func (q *queues) DeleteQueue(ctx context.Context, req *raftqv1.DeleteQueueRequest) (*raftqv1.DeleteQueueResponse, error) {
	if err := validateQueue(req.GetName(), nil); err != nil {
		return nil, err
	}
	if err := q.node.Meta().DeleteQueue(ctx, req.GetName()); err != nil {
		return forwardMeta(ctx, q.Server, err, func(ctx context.Context, c raftqv1.QueuesClient) (*raftqv1.DeleteQueueResponse, error) {
			return c.DeleteQueue(ctx, req)
		})
	}
	cmd := &fsmpb.Command{Cmd: &fsmpb.Command_DeleteQueue{DeleteQueue: &fsmpb.DeleteQueue{Queue: req.GetName()}}}
	if _, err := q.router.ApplyAll(ctx, cmd); err != nil {
		return nil, status.Errorf(codes.Unavailable, "queue %q deleted, shards not all cleared yet (reconciliation finishes it): %v", req.GetName(), err)
	}
	return &raftqv1.DeleteQueueResponse{}, nil
}

func (q *queues) PurgeQueue(ctx context.Context, req *raftqv1.PurgeQueueRequest) (*raftqv1.PurgeQueueResponse, error) {
	if err := q.ready(ctx); err != nil {
		return nil, err
	}
	if _, err := q.lookupQueue(ctx, req.GetName()); err != nil {
		return nil, err
	}
	cmd := &fsmpb.Command{Cmd: &fsmpb.Command_PurgeQueue{PurgeQueue: &fsmpb.PurgeQueue{Queue: req.GetName()}}}
	results, err := q.router.ApplyAll(ctx, cmd)
	var n uint64
	for _, r := range results {
		n += r.GetCount().GetCount()
	}
	if err != nil {
		return nil, q.toStatus(ctx, fmt.Errorf("purge %q (%d purged so far): %w", req.GetName(), n, err))
	}
	return &raftqv1.PurgeQueueResponse{Purged: n}, nil
}

func (q *queues) QueueStats(ctx context.Context, req *raftqv1.QueueStatsRequest) (*raftqv1.QueueStatsResponse, error) {
	if err := q.ready(ctx); err != nil {
		return nil, err
	}
	info, err := q.lookupQueue(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	plan, err := q.router.PlanShards()
	if err != nil {
		return nil, q.toStatus(ctx, err)
	}
	answers := router.Scatter(ctx, plan, func(ctx context.Context, p router.Part) (*peerpb.ShardReadResponse, error) {
		return q.router.Read(ctx, &peerpb.ShardReadRequest{ShardId: p.Shard, Query: &peerpb.ShardReadRequest_StatsQueue{StatsQueue: req.GetName()}})
	})
	out := &raftqv1.QueueStatsResponse{Name: req.GetName(), Tenant: fsm.TenantOf(req.GetName()), Quotas: info.GetPolicy().GetQuotas(), Paused: info.GetPaused()}
	if t, ok := q.node.Meta().Tenant(out.Tenant); ok {
		out.TenantQuotas = quotasFromFSM(t.GetQuotas())
	}
	for _, a := range answers {
		if a.Err != nil {
			return nil, q.toStatus(ctx, fmt.Errorf("stats of shard %d: %w", a.Shard, a.Err))
		}
		addShardStats(out, a.Value.GetStats())
	}
	return out, nil
}
