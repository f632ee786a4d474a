package cluster

import (
	"context"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/raftgroup"
)

// updateAddresses points a raft group led here at the current raft address
// of any server that came back elsewhere (a container restarted with a new
// IP, a node restarted on another port). The address comes from gossip and is
// trusted only after the member has been alive for the nonvoter grace; the
// change itself goes through raft (AddVoter/AddNonvoter with the same id
// keeps the suffrage and replaces the address). It makes at most one change
// per call and reports whether it made one.
func (n *Node) updateAddresses(ctx context.Context, r *raft.Raft) bool {
	f := r.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, srv := range f.Configuration().Servers {
		if string(srv.ID) == n.cfg.NodeID {
			continue
		}
		m, ok := n.gossip.get(string(srv.ID))
		if !ok || m.RaftAddr == "" || raft.ServerAddress(m.RaftAddr) == srv.Address || !n.gossip.aliveFor(m.NodeID, n.cfg.NonvoterGrace) {
			continue
		}
		if !n.proves(ctx, m.NodeID, m.RaftAddr) {
			continue
		}
		n.logger.Info("raft address changed", "member", m.NodeID, "from", srv.Address, "to", m.RaftAddr)
		var fut raft.IndexFuture
		if srv.Suffrage == raft.Voter {
			fut = r.AddVoter(srv.ID, raft.ServerAddress(m.RaftAddr), f.Index(), 5*time.Second)
		} else {
			fut = r.AddNonvoter(srv.ID, raft.ServerAddress(m.RaftAddr), f.Index(), 5*time.Second)
		}
		if err := raftgroup.WaitFuture(ctx, fut, nil); err != nil {
			n.logger.Warn("updating raft address", "member", m.NodeID, "err", err)
		}
		return true
	}
	return false
}
