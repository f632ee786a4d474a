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
// to retry at once, at this node later or at another one now. Retired: the
// node's id was retired from the cluster, so it never will be ready.
type NotReadyError struct {
	NodeID  string
	Retired bool
}

func (e *NotReadyError) Error() string {
	if e.Retired {
		return fmt.Sprintf("node %s was retired from the cluster: it serves nothing; use another node", e.NodeID)
	}
	return fmt.Sprintf("node %s is starting: shard map not loaded yet; retry", e.NodeID)
}

// retiredTopology is a Topology that can tell its node was retired
// (*cluster.Node): such a node's shard map is stale for good.
type retiredTopology interface{ Retired() bool }

// RetiredError returns a *NotReadyError if topo's node was retired, else
// nil.
func RetiredError(topo Topology) error {
	if t, ok := topo.(retiredTopology); ok && t.Retired() {
		return &NotReadyError{NodeID: topo.NodeID(), Retired: true}
	}
	return nil
}

func (e *NotReadyError) Unwrap() error { return ErrNotReady }

// shards returns the shard count, or a NotReadyError while it is 0. The
// count is fixed at bootstrap and only ever goes from 0 to its value, so a
// caller that read a non-zero count may use it for the whole call; every
// `% n` and every index by shard id on the request path must sit behind
// this check (a 0 here once crashed a restarting node with an integer
// divide by zero).
func (r *Router) shards() (uint32, error) {
	if err := RetiredError(r.topo); err != nil {
		return 0, err
	}
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
