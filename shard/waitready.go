package shard

import (
	"context"
)

// ID is the shard id.
func (s *Shard) ID() uint32 { return s.cfg.ID }

// WaitReady blocks until the queue has leasable messages on this leader
// that no receive in flight has claimed, ctx ends, or this replica stops
// leading. It leases nothing: the router uses it to long-poll many shards
// at once and then leases from the one that woke, so an abandoned wait
// never strands a lease.
func (s *Shard) WaitReady(ctx context.Context, queue string) error {
	if err := s.waitReady(ctx); err != nil {
		return err
	}
	wake, unwatch := s.watch(queue)
	defer unwatch()
	for {
		// Interest is registered before the check, so a notification
		// between the check and the select is kept, not lost.
		if s.unclaimed(queue) {
			return nil
		}
		select {
		case <-wake:
			if !s.IsLeader() {
				return s.notLeader()
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-s.closing:
			return ErrShutdown
		}
	}
}
