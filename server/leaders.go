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
// this node does not host who leads it, so that the cluster views list
// the leader as it is: a node learns the leader of a shard it does not
// host only from its own forwards (router.Topology.NoteLeader), so one
// that forwarded nothing to a new shard (after a growth, say) would list
// none, and one that forwarded before a leadership hand-off would list
// the old leader. A forward to a former leader is refused with the new
// one's name, which the router notes. A shard without a leader stays
// without one in the view.
func (c *clusterSvc) learnLeaders(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, leaderLookup)
	defer cancel()
	var wg sync.WaitGroup
	for id := range c.node.ShardCount() {
		if c.node.LocalShard(id) != nil {
			continue // its own raft knows
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
