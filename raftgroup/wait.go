package raftgroup

import (
	"context"

	"github.com/hashicorp/raft"
)

// WaitFuture waits for f, but not past ctx or down (closed once the
// group's raft.Shutdown has returned; nil if the caller has none): raft
// never answers futures left in its apply channel when it stops. On ctx
// the future keeps running and its outcome is unknown to the caller; on
// down it returns the future's answer if it has one, else
// raft.ErrRaftShutdown.
func WaitFuture(ctx context.Context, f raft.Future, down <-chan struct{}) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-down:
		select {
		case err := <-done:
			return err
		default:
			return raft.ErrRaftShutdown
		}
	}
}
