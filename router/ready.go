package router

import (
	"errors"
	"fmt"
)

// ErrNotReady means this node has not loaded the shard map yet (it is
// starting, or the cluster has not placed its shards): it cannot tell which
// shard a call belongs to, so it applied nothing.
var ErrNotReady = errors.New("node not ready")

// NotReadyError names the node. It is returned before anything is
// proposed or forwarded, so the call certainly had no effect and is safe
// to retry at once, at this node later or at another one now.
type NotReadyError struct{ NodeID string }

func (e *NotReadyError) Error() string {
	return fmt.Sprintf("node %s is starting: shard map not loaded yet; retry", e.NodeID)
}

func (e *NotReadyError) Unwrap() error { return ErrNotReady }

// shards returns the shard count, or a NotReadyError while it is 0. The
// count is fixed at bootstrap and only ever goes from 0 to its value, so a
// caller that read a non-zero count may use it for the whole call; every
// `% n` and every index by shard id on the request path must sit behind
// this check (a 0 here once crashed a restarting node with an integer
// divide by zero).
func (r *Router) shards() (uint32, error) {
	n := r.topo.ShardCount()
	if n == 0 {
		return 0, &NotReadyError{NodeID: r.topo.NodeID()}
	}
	return n, nil
}

// Ready reports whether this node knows the shard map; the error is a
// *NotReadyError when it does not.
func (r *Router) Ready() error {
	_, err := r.shards()
	return err
}
