package peer

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/meta/metapb"
	"github.com/raftq/raftq/peer/peerpb"
	"github.com/raftq/raftq/shard"
)

// MaxWait bounds one ShardWait; the client API's long poll has the same
// bound, so a router never needs a longer one.
const MaxWait = 20 * time.Second

// ErrNoReplica means this node holds no replica of the shard asked for.
var ErrNoReplica = errors.New("no replica of the shard on this node")

// Shards serves forwarded calls on the shard replicas this node leads;
// the router hands one out (router.Router.Local). Each call on a shard
// this node does not lead fails with the not-leader error the Status
// function turns into a refusal with LeaderTrailer.
type Shards interface {
	// Ready fails while this node cannot route (no shard map loaded).
	Ready() error
	ShardCount() uint32
	Apply(ctx context.Context, id uint32, cmd *fsmpb.Command) (*fsmpb.Result, error)
	// Receive leases without waiting.
	Receive(ctx context.Context, id uint32, rq *fsmpb.Receive) (*fsmpb.Result, error)
	// Wait blocks until queue has leasable, unclaimed messages or ctx
	// ends; it leases nothing.
	Wait(ctx context.Context, id uint32, queue string) error
	Read(ctx context.Context, id uint32, req *peerpb.ShardReadRequest) (*peerpb.ShardReadResponse, error)
	// Digest hashes the local replica, leader or not (ErrNoReplica
	// without one).
	Digest(id uint32) (sum [32]byte, appliedIndex uint64, err error)
}

// Node is what the service needs of the cluster node (cluster.Node
// implements it): identity checks, membership changes and repair.
type Node interface {
	NodeID() string
	Known(nodeID string) *peerpb.KnownResponse
	ChangeGroup(ctx context.Context, group string, op peerpb.GroupChangeRequest_Op, nodeID, raftAddr string) (uint64, error)
	Repair(ctx context.Context) []*peerpb.GroupRepair
	// BackupPiece streams this node's piece of group ("meta", "shard-N")
	// through send if it leads the group, and fails with a not-leader
	// error before sending anything if it does not.
	BackupPiece(ctx context.Context, group string, send func(*peerpb.BackupChunk) error) error
	// ShardDigest answers a replica comparison (a checkpoint digest);
	// errors wrap shard.ErrNoCheckpoint while the replica has not
	// recorded it.
	ShardDigest(ctx context.Context, req *peerpb.ShardDigestRequest) (*peerpb.ShardDigestResponse, error)
	// ReplicaStatus reports how far the local replica of group applied;
	// errors wrap ErrNoReplica when the node holds none.
	ReplicaStatus(group string) (*peerpb.ReplicaStatusResponse, error)
	// AppendAudit records an audit record through the meta group this
	// node leads (a not-leader error otherwise).
	AppendAudit(ctx context.Context, r *metapb.AuditRecord) error
}

// Service serves the peer protocol. It never forwards again: a node that
// does not lead the shard refuses with a leader hint and the caller
// follows it, so a call cannot loop.
type Service struct {
	peerpb.UnimplementedPeerServer
	node   Node
	shards Shards
	status func(context.Context, error) error
}

// NewService returns the service over node and shards. status turns the
// errors they return into gRPC statuses; on a not-leader error it must set
// LeaderTrailer (server/errors.go does).
func NewService(node Node, shards Shards, status func(context.Context, error) error) *Service {
	return &Service{node: node, shards: shards, status: status}
}

// Register adds the service to g, which must be the peer listener's
// server: the client port does not serve it.
func (s *Service) Register(g *grpc.Server) { peerpb.RegisterPeerServer(g, s) }

// shard checks a forwarded call's shard id. A node that has not loaded
// the shard map refuses as not ready (UNAVAILABLE, certainly not applied),
// never INVALID_ARGUMENT: the id is valid, this node just cannot know it
// yet, and the forwarding node then asks another replica.
func (s *Service) shard(ctx context.Context, id uint32) error {
	if err := s.shards.Ready(); err != nil {
		return s.status(ctx, err)
	}
	if n := s.shards.ShardCount(); id >= n {
		return status.Errorf(codes.InvalidArgument, "shard %d out of range [0,%d)", id, n)
	}
	return nil
}

func (s *Service) ShardApply(ctx context.Context, req *peerpb.ShardApplyRequest) (*peerpb.ShardApplyResponse, error) {
	if err := s.shard(ctx, req.GetShardId()); err != nil {
		return nil, err
	}
	if req.GetCommand().GetCmd() == nil {
		return nil, status.Error(codes.InvalidArgument, "empty command")
	}
	res, err := s.shards.Apply(ctx, req.GetShardId(), req.GetCommand())
	if err != nil {
		return nil, s.status(ctx, err)
	}
	return &peerpb.ShardApplyResponse{Result: res}, nil
}

func (s *Service) ShardReceive(ctx context.Context, req *peerpb.ShardReceiveRequest) (*peerpb.ShardApplyResponse, error) {
	if err := s.shard(ctx, req.GetShardId()); err != nil {
		return nil, err
	}
	if req.GetReceive().GetMax() == 0 {
		return nil, status.Error(codes.InvalidArgument, "receive.max must be at least 1 (ShardWait waits without leasing)")
	}
	res, err := s.shards.Receive(ctx, req.GetShardId(), req.GetReceive())
	if err != nil {
		return nil, s.status(ctx, err)
	}
	return &peerpb.ShardApplyResponse{Result: res}, nil
}

func (s *Service) ShardWait(ctx context.Context, req *peerpb.ShardWaitRequest) (*peerpb.ShardWaitResponse, error) {
	if err := s.shard(ctx, req.GetShardId()); err != nil {
		return nil, err
	}
	if w := req.GetWaitMs(); w < 0 || w > MaxWait.Milliseconds() {
		return nil, status.Errorf(codes.InvalidArgument, "wait_ms %d outside 0..%d", w, MaxWait.Milliseconds())
	}
	wctx, cancel := context.WithTimeout(ctx, time.Duration(req.GetWaitMs())*time.Millisecond)
	defer cancel()
	err := s.shards.Wait(wctx, req.GetShardId(), req.GetQueue())
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		// Waited the full time: an answer, not a failure.
		return &peerpb.ShardWaitResponse{}, nil
	}
	if err != nil {
		return nil, s.status(ctx, err)
	}
	return &peerpb.ShardWaitResponse{Ready: true}, nil
}

func (s *Service) ShardRead(ctx context.Context, req *peerpb.ShardReadRequest) (*peerpb.ShardReadResponse, error) {
	if err := s.shard(ctx, req.GetShardId()); err != nil {
		return nil, err
	}
	resp, err := s.shards.Read(ctx, req.GetShardId(), req)
	if err != nil {
		return nil, s.status(ctx, err)
	}
	return resp, nil
}

func (s *Service) ShardDigest(ctx context.Context, req *peerpb.ShardDigestRequest) (*peerpb.ShardDigestResponse, error) {
	id := req.GetShardId()
	if err := s.shard(ctx, id); err != nil {
		return nil, err
	}
	if req.GetCheckpoint() != 0 {
		resp, err := s.node.ShardDigest(ctx, req)
		switch {
		case errors.Is(err, ErrNoReplica), errors.Is(err, shard.ErrNoCheckpoint):
			return nil, status.Errorf(codes.NotFound, "shard %d on %s: %v", id, s.node.NodeID(), err)
		case err != nil:
			return nil, s.status(ctx, err)
		}
		return resp, nil
	}
	sum, index, err := s.shards.Digest(id)
	switch {
	case errors.Is(err, ErrNoReplica):
		return nil, status.Errorf(codes.NotFound, "node %s holds no replica of shard %d", s.node.NodeID(), id)
	case err != nil:
		return nil, status.Errorf(codes.Internal, "digest of shard %d: %v", id, err)
	}
	return &peerpb.ShardDigestResponse{NodeId: s.node.NodeID(), AppliedIndex: index, Digest: sum[:]}, nil
}

func (s *Service) Known(ctx context.Context, req *peerpb.KnownRequest) (*peerpb.KnownResponse, error) {
	if req.GetNodeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "node_id is required")
	}
	return s.node.Known(req.GetNodeId()), nil
}

func (s *Service) GroupChange(ctx context.Context, req *peerpb.GroupChangeRequest) (*peerpb.GroupChangeResponse, error) {
	if req.GetGroup() == "" || req.GetNodeId() == "" || req.GetOp() == peerpb.GroupChangeRequest_OP_UNSPECIFIED {
		return nil, status.Error(codes.InvalidArgument, "group, node_id and op are required")
	}
	last, err := s.node.ChangeGroup(ctx, req.GetGroup(), req.GetOp(), req.GetNodeId(), req.GetRaftAddr())
	if err != nil {
		return nil, s.status(ctx, err)
	}
	return &peerpb.GroupChangeResponse{LeaderId: s.node.NodeID(), LeaderLastIndex: last}, nil
}

func (s *Service) RepairLocal(ctx context.Context, req *peerpb.RepairLocalRequest) (*peerpb.RepairLocalResponse, error) {
	if id := req.GetNodeId(); id != s.node.NodeID() {
		return nil, status.Errorf(codes.FailedPrecondition, "this is node %s, not %s", s.node.NodeID(), id)
	}
	return &peerpb.RepairLocalResponse{Groups: s.node.Repair(ctx)}, nil
}

func (s *Service) ReplicaStatus(ctx context.Context, req *peerpb.ReplicaStatusRequest) (*peerpb.ReplicaStatusResponse, error) {
	if req.GetGroup() == "" {
		return nil, status.Error(codes.InvalidArgument, "group is required")
	}
	resp, err := s.node.ReplicaStatus(req.GetGroup())
	if errors.Is(err, ErrNoReplica) {
		return nil, status.Errorf(codes.NotFound, "%s on %s: %v", req.GetGroup(), s.node.NodeID(), err)
	}
	if err != nil {
		return nil, s.status(ctx, err)
	}
	return resp, nil
}

func (s *Service) MetaAudit(ctx context.Context, req *peerpb.MetaAuditRequest) (*peerpb.MetaAuditResponse, error) {
	if req.GetRecord() == nil {
		return nil, status.Error(codes.InvalidArgument, "record is required")
	}
	if err := s.node.AppendAudit(ctx, req.GetRecord()); err != nil {
		return nil, s.status(ctx, err)
	}
	return &peerpb.MetaAuditResponse{}, nil
}
