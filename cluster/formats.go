package cluster

import (
	"context"
	"time"

	"github.com/raftq/raftq/meta"
)

// recordFormats, run by the meta leader, writes into the meta log the log
// format of every alive member whose advertised format (gossip
// NodeMeta.log_format) differs from the record, so that every node gates
// command kinds on the same formats (shard.Config.NodeFormat,
// meta.Store's propose path). A node's record follows its binary both ways:
// a rolled-back node records its lower format.
//
// It records nothing while a meta replica (voter or nonvoter) advertises
// no format, or has never been seen in gossip: it may run a binary from
// before log formats, which stops on the NodeFormat command
// (fsm.IgnorableKindMin). Until the records exist, every node counts as
// fsm.BaseFormat, which holds back only kinds newer than every release so
// far.
func (n *Node) recordFormats(ctx context.Context) {
	f := n.meta.Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		return
	}
	advertised := n.gossip.logFormats()
	for _, id := range meta.Servers(f.Configuration()) {
		if advertised[id] == 0 {
			return
		}
	}
	for _, m := range n.gossip.alive() {
		want := m.meta.GetLogFormat()
		if want == 0 || n.meta.NodeFormat(m.NodeID) == want {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := n.meta.RecordNodeFormat(rctx, m.NodeID, want)
		cancel()
		if err != nil {
			n.logger.Warn("meta: recording log format", "member", m.NodeID, "format", want, "err", err)
			return
		}
		n.logger.Info("meta: recorded log format", "member", m.NodeID, "format", want)
	}
}

// logFormats is the last advertised log format of every member gossip has
// seen, in any state (0: advertised none).
func (g *gossip) logFormats() map[string]uint32 {
	g.mu.RLock()
	defer g.mu.RUnlock()
	out := make(map[string]uint32, len(g.members))
	for id, m := range g.members {
		out[id] = m.meta.GetLogFormat()
	}
	return out
}
