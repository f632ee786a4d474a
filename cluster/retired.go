package cluster

import (
	"context"
	"time"

	"github.com/raftq/raftq/peer/peerpb"
)

// A node whose id was retired (drained by remove-node or replace-node, or
// replaced after staying dead) must stay out for good: the groups it was
// in removed it, and the meta leader never admits its id again. Its own
// meta replica was cut off before the retirement was committed, so it
// cannot learn it there; it asks a member with meta state (peer RPC Known)
// at start and then now and then, says so in its own log, and stays out:
// its raft traffic is cut (raftmux isolation), its shard replicas are
// closed and none is opened again. Until the first answer its replicas
// may run for a moment; the groups ignore them (hashicorp/raft refuses
// votes from servers outside its configuration, and no leader sends to
// them).

const (
	retiredCheckFirst = time.Second      // until a member has answered
	retiredCheckEvery = 10 * time.Second // then
)

// retiredLoop runs on every node once its identity is verified (an
// unverified node learns it in verifyWith) until it finds its id retired.
func (n *Node) retiredLoop(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-n.verifiedCh():
	}
	wait := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		retired, answered := n.checkRetired(ctx)
		if retired {
			n.stayOutRetired()
			return
		}
		wait = retiredCheckFirst
		if answered {
			wait = retiredCheckEvery
		}
	}
}

// checkRetired asks the local map, then one member with meta state,
// whether this node's id is retired; answered is false if nobody could
// say.
func (n *Node) checkRetired(ctx context.Context) (retired, answered bool) {
	if n.meta.ShardMap().IsRetired(n.cfg.NodeID) {
		return true, true
	}
	for _, m := range n.gossip.alive() {
		if m.NodeID == n.cfg.NodeID || !m.meta.GetHasState() {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		resp, err := n.cfg.Peers.Known(cctx, m.Member, &peerpb.KnownRequest{NodeId: n.cfg.NodeID})
		cancel()
		if err != nil || !resp.GetHasState() {
			continue
		}
		return resp.GetRetired(), true
	}
	return false, false
}

// stayOutRetired takes this node out of raft for good and says so once.
func (n *Node) stayOutRetired() {
	if n.retired.Swap(true) {
		return
	}
	n.mux.SetIsolated(true)
	n.logger.Error("this node's id was retired from the cluster (removed or replaced): it takes no part: "+
		"its replicas are closed and none is opened; to bring this machine back, start it with a new node id and an empty data directory (docs/operations.md)",
		"node_id", n.cfg.NodeID)
	n.shards.kick() // manageLoop closes the open replicas
	// The meta replica too: cut off, it would only campaign in a loop.
	ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
	defer cancel()
	if err := n.meta.Shutdown(ctx); err != nil {
		n.logger.Warn("closing the meta replica of a retired node", "err", err)
	}
}

// Retired reports whether this node found its id retired and stays out.
func (n *Node) Retired() bool { return n.retired.Load() }
