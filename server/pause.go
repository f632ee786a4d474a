package server

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
)

// PauseQueue records the pause in meta, then pushes the queue's policy,
// paused, to every shard before answering, as UpdateQueue does: once it
// returns, no shard leases a message of the queue. If the push is cut
// short, the shard leaders' reconciliation finishes it.
func (q *queues) PauseQueue(ctx context.Context, req *raftqv1.PauseQueueRequest) (*raftqv1.QueueInfo, error) {
	return q.setPaused(ctx, req.GetName(), true, func(ctx context.Context, c raftqv1.QueuesClient) (*raftqv1.QueueInfo, error) {
		return c.PauseQueue(ctx, req)
	})
}

// ResumeQueue lifts a pause; the shards wake their long polls as the
// resumed policy applies.
func (q *queues) ResumeQueue(ctx context.Context, req *raftqv1.ResumeQueueRequest) (*raftqv1.QueueInfo, error) {
	return q.setPaused(ctx, req.GetName(), false, func(ctx context.Context, c raftqv1.QueuesClient) (*raftqv1.QueueInfo, error) {
		return c.ResumeQueue(ctx, req)
	})
}

func (q *queues) setPaused(ctx context.Context, name string, paused bool, forward func(context.Context, raftqv1.QueuesClient) (*raftqv1.QueueInfo, error)) (*raftqv1.QueueInfo, error) {
	if err := validateQueue(name, nil); err != nil {
		return nil, err
	}
	mq, err := q.node.Meta().PauseQueue(ctx, name, paused)
	if err != nil {
		return forwardMeta(ctx, q.Server, err, forward)
	}
	if _, err := q.router.ApplyAll(ctx, q.upsertCmd(mq)); err != nil {
		verb := "resumed"
		if paused {
			verb = "paused"
		}
		return nil, status.Errorf(codes.Unavailable, "queue %q %s in meta, shards not all updated yet (retry is safe): %v", name, verb, err)
	}
	return queueInfo(mq), nil
}
