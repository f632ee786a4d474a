package cluster

import (
	"context"
	"time"

	"github.com/hashicorp/raft"
)

// proveWait bounds one identity probe of a raft address.
const proveWait = 3 * time.Second

// proves reports whether addr holds the certificate of node id. Gossip
// tells where a member is, but under TLS gossip alone never puts an
// address into a raft configuration: a member that claims another's id
// (or a stale entry) fails the probe and nothing changes. Without TLS
// every address passes, as before.
func (n *Node) proves(ctx context.Context, id, addr string) bool {
	if id == n.cfg.NodeID {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, proveWait)
	defer cancel()
	if err := n.mux.Prove(ctx, addr, id); err != nil {
		n.logger.Warn("a raft address did not prove its node's identity; not used", "member", id, "raft", addr, "err", err)
		return false
	}
	return true
}

// allProve is proves for every server of a configuration to be.
func (n *Node) allProve(ctx context.Context, servers []raft.Server) bool {
	for _, s := range servers {
		if !n.proves(ctx, string(s.ID), string(s.Address)) {
			return false
		}
	}
	return true
}
