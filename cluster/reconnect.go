package cluster

import (
	"context"
	"time"
)

// reconnectInterval paces attempts to reach members gossip declared dead.
const reconnectInterval = 5 * time.Second

// reconnectLoop re-joins members that memberlist declared dead. memberlist
// stops probing a dead member once GossipToTheDeadTime has passed, so after
// a partition longer than that both sides would stay split in gossip for
// good, although raft heals on its own (serf's reconnect does the same for
// Consul). Members that left gracefully are not chased: they rejoin
// through their seeds when they restart.
func (g *gossip) reconnectLoop(ctx context.Context) {
	t := time.NewTicker(reconnectInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var addrs []string
		g.mu.RLock()
		for _, m := range g.members {
			if m.State == "dead" && m.GossipAddr != "" && m.GossipAddr != g.selfAddr {
				addrs = append(addrs, m.GossipAddr)
			}
		}
		g.mu.RUnlock()
		if len(addrs) == 0 {
			continue
		}
		if n, err := g.ml.Join(addrs); n > 0 {
			g.n.logger.Info("gossip: reconnected to members declared dead", "contacted", n)
		} else {
			g.n.logger.Debug("gossip: reconnect failed", "addrs", addrs, "err", err)
		}
	}
}
