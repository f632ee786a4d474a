package client

import (
	"context"
	"fmt"
	"time"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"google.golang.org/grpc"
)

// Queue administration goes to any node: the meta group serves it and every
// node forwards. All of it is safe to retry (create and update are
// idempotent for the same policy; delete and purge of a gone queue answer
// NOT_FOUND).

// CreateQueue creates a queue, or succeeds if it exists with the same policy.
func (c *Client) CreateQueue(ctx context.Context, name string, opts QueueOptions) (QueueInfo, error) {
	var resp *raftqv1.QueueInfo
	err := c.invoke(ctx, callSpec{shard: anyShard, safe: true}, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) (err error) {
		resp, err = raftqv1.NewQueuesClient(cc).CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: name, Policy: opts.policy()}, co...)
		return err
	})
	if err != nil {
		return QueueInfo{}, fmt.Errorf("create queue %q: %w", name, err)
	}
	return queueInfoFrom(resp), nil
}

// GetQueue returns a queue's policy.
func (c *Client) GetQueue(ctx context.Context, name string) (QueueInfo, error) {
	var resp *raftqv1.QueueInfo
	err := c.invoke(ctx, callSpec{shard: anyShard, safe: true}, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) (err error) {
		resp, err = raftqv1.NewQueuesClient(cc).GetQueue(ctx, &raftqv1.GetQueueRequest{Name: name}, co...)
		return err
	})
	if err != nil {
		return QueueInfo{}, fmt.Errorf("get queue %q: %w", name, err)
	}
	return queueInfoFrom(resp), nil
}

// ListQueues lists every queue.
func (c *Client) ListQueues(ctx context.Context) ([]QueueInfo, error) {
	var out []QueueInfo
	token := ""
	for {
		var resp *raftqv1.ListQueuesResponse
		req := &raftqv1.ListQueuesRequest{PageToken: token}
		err := c.invoke(ctx, callSpec{shard: anyShard, safe: true}, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) (err error) {
			resp, err = raftqv1.NewQueuesClient(cc).ListQueues(ctx, req, co...)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("list queues: %w", err)
		}
		for _, q := range resp.GetQueues() {
			out = append(out, queueInfoFrom(q))
		}
		// Pages follow on from a name, so a token from one node works on
		// any other.
		if token = resp.GetNextPageToken(); token == "" {
			return out, nil
		}
	}
}

// UpdateQueue replaces a queue's policy. Zero fields mean the server default,
// not "unchanged": read with GetQueue and modify to change one field.
func (c *Client) UpdateQueue(ctx context.Context, name string, opts QueueOptions) (QueueInfo, error) {
	var resp *raftqv1.QueueInfo
	err := c.invoke(ctx, callSpec{shard: anyShard, safe: true}, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) (err error) {
		resp, err = raftqv1.NewQueuesClient(cc).UpdateQueue(ctx, &raftqv1.UpdateQueueRequest{Name: name, Policy: opts.policy()}, co...)
		return err
	})
	if err != nil {
		return QueueInfo{}, fmt.Errorf("update queue %q: %w", name, err)
	}
	return queueInfoFrom(resp), nil
}

// DeleteQueue deletes a queue and all its messages.
func (c *Client) DeleteQueue(ctx context.Context, name string) error {
	err := c.invoke(ctx, callSpec{shard: anyShard, safe: true}, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) error {
		_, err := raftqv1.NewQueuesClient(cc).DeleteQueue(ctx, &raftqv1.DeleteQueueRequest{Name: name}, co...)
		return err
	})
	if err != nil {
		return fmt.Errorf("delete queue %q: %w", name, err)
	}
	return nil
}

// PurgeQueue removes every ready and delayed message and returns the count.
func (c *Client) PurgeQueue(ctx context.Context, name string) (uint64, error) {
	var resp *raftqv1.PurgeQueueResponse
	err := c.invoke(ctx, callSpec{shard: anyShard, safe: true}, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) (err error) {
		resp, err = raftqv1.NewQueuesClient(cc).PurgeQueue(ctx, &raftqv1.PurgeQueueRequest{Name: name}, co...)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("purge queue %q: %w", name, err)
	}
	return resp.GetPurged(), nil
}

// Stats counts a queue's messages by state over all shards.
func (c *Client) Stats(ctx context.Context, name string) (QueueStats, error) {
	var resp *raftqv1.QueueStatsResponse
	err := c.invoke(ctx, callSpec{shard: anyShard, safe: true}, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) (err error) {
		resp, err = raftqv1.NewQueuesClient(cc).QueueStats(ctx, &raftqv1.QueueStatsRequest{Name: name}, co...)
		return err
	})
	if err != nil {
		return QueueStats{}, fmt.Errorf("queue stats %q: %w", name, err)
	}
	return QueueStats{
		Name:          resp.GetName(),
		Ready:         resp.GetReady(),
		Delayed:       resp.GetDelayed(),
		InFlight:      resp.GetInFlight(),
		Dead:          resp.GetDead(),
		DeadExpired:   resp.GetDeadExpired(),
		OldestReady:   time.Duration(resp.GetOldestReadyAgeMs()) * time.Millisecond,
		BlockedGroups: resp.GetBlockedGroups(),
		LiveBytes:     resp.GetLiveBytes(),
		Tenant:        resp.GetTenant(),
		Quotas:        quotasFrom(resp.GetQuotas()),
		TenantQuotas:  quotasFrom(resp.GetTenantQuotas()),

		Completed:        resp.GetCompleted(),
		CompletedBytes:   resp.GetCompletedBytes(),
		CompletedEvicted: resp.GetCompletedEvicted(),
		Retained:         resp.GetRetained(),
		Paused:           resp.GetPaused(),
		Moves:            resp.GetMoves(),
	}, nil
}
