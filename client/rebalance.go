package client

import (
	"context"
	"fmt"

	"google.golang.org/grpc"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
)

// RebalancePlan is what the meta leader would do (or started doing) to
// spread replicas and preferred leaders evenly over the live nodes.
type RebalancePlan struct {
	Moves   []PlannedMove  // replica moves, in the order they run
	Leaders []LeaderChange // preferred-leader changes, once the moves are done
	Nodes   []NodeBalance  // the nodes that count, sorted by id
	// Started: the meta leader began carrying the plan out.
	Started bool
	// Moving is the replica move running now ("" if none).
	Moving string
	// Automatic: the meta leader rebalances on its own (--rebalance).
	Automatic bool
}

// PlannedMove moves Shard's replica on From to To.
type PlannedMove struct {
	Shard    uint32
	From, To string
}

// LeaderChange makes To the preferred leader of Shard instead of From.
type LeaderChange struct {
	Shard    uint32
	From, To string
}

// NodeBalance is a node's replica and preferred-leader counts now and
// after the plan.
type NodeBalance struct {
	NodeID                  string
	Replicas, ReplicasAfter int
	Leaders, LeadersAfter   int
}

// Rebalance asks the meta leader for its balance plan; unless dryRun it
// also starts carrying it out at once (moves run one at a time; ask again
// for progress). It fails with FAILED_PRECONDITION while a node is being
// drained.
func (c *Client) Rebalance(ctx context.Context, dryRun bool) (RebalancePlan, error) {
	var resp *raftqv1.RebalanceResponse
	err := c.invoke(ctx, callSpec{shard: anyShard, safe: true}, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) (err error) {
		resp, err = raftqv1.NewClusterClient(cc).Rebalance(ctx, &raftqv1.RebalanceRequest{DryRun: dryRun}, co...)
		return err
	})
	if err != nil {
		return RebalancePlan{}, fmt.Errorf("rebalance: %w", fromStatus(err))
	}
	p := RebalancePlan{Started: resp.GetStarted(), Moving: resp.GetMoving(), Automatic: resp.GetAutomatic()}
	for _, m := range resp.GetMoves() {
		p.Moves = append(p.Moves, PlannedMove{Shard: m.GetShardId(), From: m.GetFrom(), To: m.GetTo()})
	}
	for _, l := range resp.GetLeaders() {
		p.Leaders = append(p.Leaders, LeaderChange{Shard: l.GetShardId(), From: l.GetFrom(), To: l.GetTo()})
	}
	for _, n := range resp.GetNodes() {
		p.Nodes = append(p.Nodes, NodeBalance{NodeID: n.GetNodeId(), Replicas: int(n.GetReplicas()), ReplicasAfter: int(n.GetReplicasAfter()),
			Leaders: int(n.GetLeaders()), LeadersAfter: int(n.GetLeadersAfter())})
	}
	return p, nil
}
