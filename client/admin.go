package client

import (
	"context"
	"fmt"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"google.golang.org/grpc"
)

// ListDead lists up to limit dead messages of queue (0: the server's
// default of 100), oldest death first: the first page of ListDeadPage.
func (c *Client) ListDead(ctx context.Context, queue string, limit int) ([]*MessageInfo, error) {
	ms, _, err := c.ListDeadPage(ctx, queue, limit, "")
	return ms, err
}

// ListDeadPage lists one page of queue's dead messages, oldest death
// first, from token (empty: the first page). next is the token of the
// page after, empty when none may follow. A page holds up to limit
// messages (0: 100, at most 1000) and ends early where one more would
// take the answer past 3 MiB.
func (c *Client) ListDeadPage(ctx context.Context, queue string, limit int, token string) (ms []*MessageInfo, next string, err error) {
	return c.ListDeadMatching(ctx, queue, nil, limit, token)
}

// ListDeadMatching is ListDeadPage of the dead messages f matches (nil:
// all). Pass the same filter with every page. A page of a filtered listing
// may be short, even empty, and still have a next token: each shard looks
// at a bounded number of dead messages per call.
func (c *Client) ListDeadMatching(ctx context.Context, queue string, f *DeadFilter, limit int, token string) (ms []*MessageInfo, next string, err error) {
	if limit < 0 {
		return nil, "", fmt.Errorf("list dead of %q: %w", queue, invalid(fmt.Sprintf("negative limit %d", limit)))
	}
	var resp *raftqv1.ListDeadResponse
	req := &raftqv1.ListDeadRequest{Queue: queue, Limit: uint32(limit), PageToken: token, Filter: f.proto()}
	err = c.invoke(ctx, callSpec{shard: anyShard, safe: true}, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) (err error) {
		resp, err = raftqv1.NewDeadLettersClient(cc).ListDead(ctx, req, co...)
		return err
	})
	if err != nil {
		return nil, "", fmt.Errorf("list dead of %q: %w", queue, err)
	}
	out := make([]*MessageInfo, len(resp.GetMessages()))
	for i, m := range resp.GetMessages() {
		out[i] = messageInfoFrom(m)
	}
	return out, resp.GetNextPageToken(), nil
}

// RedriveOptions select what a redrive moves.
type RedriveOptions struct {
	IDs  []string // empty: every dead message of the queue (that Filter matches)
	Rate int      // messages per second; 0: the server default (100), max 500
	// Target, when set, moves the messages to that queue: each is sent
	// there with the dedup key "redrive:QUEUE/ID" and discarded here once
	// the copy is committed (docs/jobs.md, "Dead letters").
	Target string
	// Filter narrows a redrive without IDs.
	Filter *DeadFilter
}

// Redrive moves dead messages back to ready (or to o.Target),
// rate-limited by the server, and returns how many moved. Retrying is
// safe: a message already moved is no longer dead, and a copy already in
// the target is found by its dedup key within the target's dedup window.
func (c *Client) Redrive(ctx context.Context, queue string, o RedriveOptions) (uint64, error) {
	resp, err := c.redrive(ctx, queue, o, false)
	if err != nil {
		return 0, err
	}
	return resp.GetRedriven(), nil
}

// RedrivePlan is what a redrive would move: Matched in all, the first
// (at most 1000) of them oldest death first.
type RedrivePlan struct {
	Matched  uint64
	Messages []*MessageInfo
}

// RedriveDryRun answers what Redrive with o would move, moving nothing.
func (c *Client) RedriveDryRun(ctx context.Context, queue string, o RedriveOptions) (RedrivePlan, error) {
	resp, err := c.redrive(ctx, queue, o, true)
	if err != nil {
		return RedrivePlan{}, err
	}
	plan := RedrivePlan{Matched: resp.GetMatched()}
	for _, m := range resp.GetWouldMove() {
		plan.Messages = append(plan.Messages, messageInfoFrom(m))
	}
	return plan, nil
}

func (c *Client) redrive(ctx context.Context, queue string, o RedriveOptions, dry bool) (*raftqv1.RedriveResponse, error) {
	if o.Rate < 0 || o.Rate > 500 {
		return nil, fmt.Errorf("redrive %q: %w", queue, invalid(fmt.Sprintf("rate %d outside 0-500", o.Rate)))
	}
	var resp *raftqv1.RedriveResponse
	req := &raftqv1.RedriveRequest{Queue: queue, MessageIds: o.IDs, RatePerS: uint32(o.Rate),
		TargetQueue: o.Target, Filter: o.Filter.proto(), DryRun: dry}
	err := c.invoke(ctx, callSpec{shard: anyShard, safe: true}, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) (err error) {
		resp, err = raftqv1.NewDeadLettersClient(cc).Redrive(ctx, req, co...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("redrive %q: %w", queue, err)
	}
	return resp, nil
}

// Discard deletes dead messages (all of the queue's when ids is empty) and
// returns how many were deleted.
func (c *Client) Discard(ctx context.Context, queue string, ids ...string) (uint64, error) {
	var resp *raftqv1.DiscardResponse
	req := &raftqv1.DiscardRequest{Queue: queue, MessageIds: ids}
	err := c.invoke(ctx, callSpec{shard: anyShard, safe: true}, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) (err error) {
		resp, err = raftqv1.NewDeadLettersClient(cc).Discard(ctx, req, co...)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("discard dead of %q: %w", queue, err)
	}
	return resp.GetDiscarded(), nil
}

// Member is a cluster node as gossip sees it.
type Member struct {
	NodeID   string
	GRPCAddr string
	RaftAddr string
	PeerAddr string // node-to-node protocol
	State    string // alive, suspect, dead
	// LogFormat is the replicated-log format recorded for the node in meta
	// (0: none recorded yet); docs/deploy.md, "Log formats across an
	// upgrade".
	LogFormat uint32
}

// ShardInfo is one shard's replicas and leader.
type ShardInfo struct {
	ID           uint32
	Replicas     []string
	LeaderID     string
	LeaderAddr   string
	Term         uint64
	CommitIndex  uint64
	AppliedIndex uint64
	// LastSnapshotIndex and LastSnapshotTerm: what the answering node's
	// replica's latest snapshot covers (0: none yet, or not hosted there).
	LastSnapshotIndex, LastSnapshotTerm uint64
}

// ClusterStatus is one node's view of the cluster.
type ClusterStatus struct {
	NodeID       string // the node that answered
	MetaLeaderID string
	Members      []Member
	Shards       []ShardInfo
	// Damaged lists the answering node's replicas found damaged: they do
	// not vote or serve until repaired (Client.Repair).
	Damaged []DamagedReplica
}

// DamagedReplica is a replica that was found damaged.
type DamagedReplica struct {
	Group  string // "meta" or "shard-N"
	Reason string // e.g. "checksum", "log-short", "store-missing"
	Detail string
}

// GroupRepair is what Repair did to one replica.
type GroupRepair struct {
	Group, Reason, Outcome string
}

// Status asks for a node's view of the cluster: the first seed (Dial's
// addresses, in order) that answers, so `raftq --addr X cluster status`
// shows X's view, X's damaged replicas included; any node when no seed
// answers.
func (c *Client) Status(ctx context.Context) (*ClusterStatus, error) {
	var resp *raftqv1.StatusResponse
	var err error
	for _, addr := range c.seeds {
		_, err = c.attempt(ctx, addr, c.cfg.callTimeout, true, func(ctx context.Context, cc *grpc.ClientConn) (err error) {
			resp, err = raftqv1.NewClusterClient(cc).Status(ctx, &raftqv1.StatusRequest{})
			return err
		})
		if err == nil || ctx.Err() != nil {
			break
		}
	}
	if err != nil && ctx.Err() == nil {
		err = c.invoke(ctx, callSpec{shard: anyShard, safe: true}, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) (err error) {
			resp, err = raftqv1.NewClusterClient(cc).Status(ctx, &raftqv1.StatusRequest{}, co...)
			return err
		})
	}
	if err != nil {
		return nil, fmt.Errorf("cluster status: %w", fromStatus(err))
	}
	return statusFromProto(resp), nil
}

// StatusAt asks the node at addr, and no other, for its view of the
// cluster: Status falls back to any node when no seed answers, which a
// caller that needs one node's own indexes (a rolling restart waiting for
// that node to catch up) must not get. addr need not be a seed.
func (c *Client) StatusAt(ctx context.Context, addr string) (*ClusterStatus, error) {
	var resp *raftqv1.StatusResponse
	_, err := c.attempt(ctx, addr, c.cfg.callTimeout, true, func(ctx context.Context, cc *grpc.ClientConn) (err error) {
		resp, err = raftqv1.NewClusterClient(cc).Status(ctx, &raftqv1.StatusRequest{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cluster status of %s: %w", addr, fromStatus(err))
	}
	return statusFromProto(resp), nil
}

func statusFromProto(resp *raftqv1.StatusResponse) *ClusterStatus {
	out := &ClusterStatus{NodeID: resp.GetNodeId(), MetaLeaderID: resp.GetMetaLeaderId()}
	for _, d := range resp.GetDamaged() {
		out.Damaged = append(out.Damaged, DamagedReplica{Group: d.GetGroup(), Reason: d.GetReason(), Detail: d.GetDetail()})
	}
	for _, m := range resp.GetMembers() {
		out.Members = append(out.Members, Member{
			NodeID: m.GetNodeId(), GRPCAddr: m.GetGrpcAddr(), RaftAddr: m.GetRaftAddr(), PeerAddr: m.GetPeerAddr(),
			State: m.GetState(), LogFormat: m.GetLogFormat(),
		})
	}
	for _, s := range resp.GetShards() {
		out.Shards = append(out.Shards, ShardInfo{
			ID: s.GetShardId(), Replicas: s.GetReplicas(), LeaderID: s.GetLeaderId(), LeaderAddr: s.GetLeaderGrpcAddr(),
			Term: s.GetTerm(), CommitIndex: s.GetCommitIndex(), AppliedIndex: s.GetAppliedIndex(),
			LastSnapshotIndex: s.GetLastSnapshotIndex(), LastSnapshotTerm: s.GetLastSnapshotTerm(),
		})
	}
	return out
}

// Repair removes node's damaged replicas from their raft groups and
// re-adds them empty, through raft (docs/operations.md). It returns what
// happened to each; a replica re-added catches up and is promoted in the
// background.
func (c *Client) Repair(ctx context.Context, node string) ([]GroupRepair, error) {
	var resp *raftqv1.RepairResponse
	err := c.invoke(ctx, callSpec{shard: anyShard, safe: true}, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) (err error) {
		resp, err = raftqv1.NewClusterClient(cc).Repair(ctx, &raftqv1.RepairRequest{NodeId: node}, co...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("repair %s: %w", node, err)
	}
	out := make([]GroupRepair, 0, len(resp.GetGroups()))
	for _, g := range resp.GetGroups() {
		out = append(out, GroupRepair{Group: g.GetGroup(), Reason: g.GetReason(), Outcome: g.GetOutcome()})
	}
	return out, nil
}

// NodeInfo is one node as the answering node knows it (Client.Nodes).
type NodeInfo struct {
	NodeID   string
	GRPCAddr string
	PeerAddr string
	RaftAddr string
	// State is the gossip state ("alive", "suspect", "dead", "left"), or
	// "unknown" for a node meta lists that gossip does not know.
	State     string
	Version   string
	LogFormat uint32
	// Replicas are the shards the shard map places on the node; Leaders
	// the shards it leads, as the answering node sees them.
	Replicas []uint32
	Leaders  []uint32
	// Meta is the node's place in the meta group: "voter", "nonvoter" or
	// "" (not a member).
	Meta string
	// Draining: being removed or replaced; Retired: removed for good.
	Draining, Retired bool
}

// Nodes lists every node the cluster knows of, sorted by id: gossip
// members, meta servers and shard replicas.
func (c *Client) Nodes(ctx context.Context) ([]NodeInfo, error) {
	var resp *raftqv1.NodesResponse
	err := c.invoke(ctx, callSpec{shard: anyShard, safe: true}, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) (err error) {
		resp, err = raftqv1.NewClusterClient(cc).Nodes(ctx, &raftqv1.NodesRequest{}, co...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cluster nodes: %w", fromStatus(err))
	}
	out := make([]NodeInfo, 0, len(resp.GetNodes()))
	for _, n := range resp.GetNodes() {
		out = append(out, NodeInfo{
			NodeID: n.GetNodeId(), GRPCAddr: n.GetGrpcAddr(), PeerAddr: n.GetPeerAddr(), RaftAddr: n.GetRaftAddr(),
			State: n.GetState(), Version: n.GetVersion(), LogFormat: n.GetLogFormat(),
			Replicas: n.GetReplicas(), Leaders: n.GetLeaders(), Meta: n.GetMeta(),
			Draining: n.GetDraining(), Retired: n.GetRetired(),
		})
	}
	return out, nil
}

// NodeDrain is the progress of a node's removal or replacement.
type NodeDrain struct {
	NodeID string
	To     string // the replacement; "" for RemoveNode
	// Done: the node holds no replica, is out of meta and retired.
	Done bool
	// Replicas are the shards it still holds; Moving the replica move
	// running now ("" if none).
	Replicas []uint32
	Moving   string
}

// RemoveNode drains node: its replicas move to the least loaded nodes,
// one at a time through raft, then it leaves meta and its id is retired.
// It returns once the drain is recorded; calling it again is harmless and
// reports progress (Done once finished).
func (c *Client) RemoveNode(ctx context.Context, node string) (NodeDrain, error) {
	var resp *raftqv1.NodeDrainResponse
	err := c.invoke(ctx, callSpec{shard: anyShard, safe: true}, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) (err error) {
		resp, err = raftqv1.NewClusterClient(cc).RemoveNode(ctx, &raftqv1.RemoveNodeRequest{NodeId: node}, co...)
		return err
	})
	if err != nil {
		return NodeDrain{}, fmt.Errorf("remove node %s: %w", node, fromStatus(err))
	}
	return nodeDrain(resp), nil
}

// ReplaceNode drains old to replacement, a member already, then removes
// and retires old; like RemoveNode it returns once recorded and may be
// called again for progress.
func (c *Client) ReplaceNode(ctx context.Context, old, replacement string) (NodeDrain, error) {
	var resp *raftqv1.NodeDrainResponse
	err := c.invoke(ctx, callSpec{shard: anyShard, safe: true}, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) (err error) {
		resp, err = raftqv1.NewClusterClient(cc).ReplaceNode(ctx, &raftqv1.ReplaceNodeRequest{OldNodeId: old, NewNodeId: replacement}, co...)
		return err
	})
	if err != nil {
		return NodeDrain{}, fmt.Errorf("replace node %s with %s: %w", old, replacement, fromStatus(err))
	}
	return nodeDrain(resp), nil
}

func nodeDrain(r *raftqv1.NodeDrainResponse) NodeDrain {
	return NodeDrain{NodeID: r.GetNodeId(), To: r.GetTo(), Done: r.GetDone(), Replicas: r.GetReplicas(), Moving: r.GetMoving()}
}

// MoveCancel is the outcome of CancelMove.
type MoveCancel struct {
	Shard    uint32
	From, To string
	// Aborted: the abort is complete; false while the meta leader is still
	// removing the new replica from the group (seconds).
	Aborted bool
}

// CancelMove aborts the replica move running on shard while its new
// replica is still a nonvoter (the move's add phase): the new replica
// leaves the group and the map, and a ReplaceNode onto it is cancelled.
// The error matches ErrNotFound when no move runs on the shard, and is a
// FailedPrecondition once the new replica is promoted (the move can then
// only finish). It is not retried after an ambiguous failure: by then the
// abort may have completed and the shard's next move begun, which a repeat
// would cancel too.
func (c *Client) CancelMove(ctx context.Context, shard uint32) (MoveCancel, error) {
	var resp *raftqv1.CancelMoveResponse
	err := c.invoke(ctx, callSpec{shard: anyShard}, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) (err error) {
		resp, err = raftqv1.NewClusterClient(cc).CancelMove(ctx, &raftqv1.CancelMoveRequest{Shard: shard}, co...)
		return err
	})
	if err != nil {
		return MoveCancel{}, fmt.Errorf("cancel the move of shard %d: %w", shard, fromStatus(err))
	}
	return MoveCancel{Shard: resp.GetShard(), From: resp.GetFrom(), To: resp.GetTo(), Aborted: resp.GetAborted()}, nil
}
