package server

import (
	"context"
	"sync"
	"time"

	"github.com/raftq/raftq/peer/peerpb"
)

// leaderLookup bounds the reads that find leaders this node does not know.
const leaderLookup = time.Second

// learnLeaders asks, in parallel and for at most leaderLookup, every shard
// whose leader this node does not know, so that the cluster views list
// it: a node learns the leader of a shard it does not host only from its
// own forwards (router.Topology.NoteLeader), and a node that forwarded
// nothing to a new shard (after a growth, say) would list none. A shard
// without a leader stays without one in the view.
func (c *clusterSvc) learnLeaders(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, leaderLookup)
	defer cancel()
	var wg sync.WaitGroup
	for id := range c.node.ShardCount() {
		if leader, _, ok := c.node.ShardLeader(id); ok && leader != "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Any read reaches the leader, and the forward notes it.
			_, _ = c.router.Read(ctx, &peerpb.ShardReadRequest{ShardId: id, Query: &peerpb.ShardReadRequest_StatsQueue{StatsQueue: ""}})
		}()
	}
	wg.Wait()
}
