package server

import (
	"context"
)

// ready answers a call that needs the shard map while this node has not
// loaded it (it is starting): UNAVAILABLE with the raftq-leader trailer,
// which marks the call as certainly not applied, so clients and forwarding
// nodes retry at once elsewhere. Without this a restarting node answered
// valid calls INVALID_ARGUMENT ("shard 0 out of range"), which clients
// treat as final, or crashed dividing by a shard count of 0.
func (s *Server) ready(ctx context.Context) error {
	if err := s.router.Ready(); err != nil {
		return s.toStatus(ctx, err)
	}
	return nil
}
