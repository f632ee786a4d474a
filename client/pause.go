package client

import (
	"context"
	"fmt"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"google.golang.org/grpc"
)

// PauseQueue pauses a queue: from its return until ResumeQueue, receives
// return nothing (long polls wait), sends are still accepted, and leases
// already granted run on to their ack, nack or expiry. The pause is
// replicated, so it holds across leader changes and restarts. Pausing a
// paused queue changes nothing, so it is safe to retry.
func (c *Client) PauseQueue(ctx context.Context, name string) (QueueInfo, error) {
	var resp *raftqv1.QueueInfo
	err := c.invoke(ctx, callSpec{shard: anyShard, safe: true}, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) (err error) {
		resp, err = raftqv1.NewQueuesClient(cc).PauseQueue(ctx, &raftqv1.PauseQueueRequest{Name: name}, co...)
		return err
	})
	if err != nil {
		return QueueInfo{}, fmt.Errorf("pause queue %q: %w", name, err)
	}
	return queueInfoFrom(resp), nil
}

// ResumeQueue lifts a pause: waiting receives wake and lease again.
// Resuming a queue that is not paused changes nothing.
func (c *Client) ResumeQueue(ctx context.Context, name string) (QueueInfo, error) {
	var resp *raftqv1.QueueInfo
	err := c.invoke(ctx, callSpec{shard: anyShard, safe: true}, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) (err error) {
		resp, err = raftqv1.NewQueuesClient(cc).ResumeQueue(ctx, &raftqv1.ResumeQueueRequest{Name: name}, co...)
		return err
	})
	if err != nil {
		return QueueInfo{}, fmt.Errorf("resume queue %q: %w", name, err)
	}
	return queueInfoFrom(resp), nil
}
