package peer

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/internal/liveness"
	"github.com/raftq/raftq/meta/metapb"
	"github.com/raftq/raftq/peer/peerpb"
	"github.com/raftq/raftq/shard"
)

var errNotLeader = errors.New("not the leader")

// fakeShards leads shard 0 of 2 and hosts no replica of shard 1; ready
// says whether the shard map is loaded.
type fakeShards struct {
	ready  bool
	waited chan string // queues Wait was called for
}

func (f *fakeShards) Ready() error {
	if !f.ready {
		return errors.New("starting")
	}
	return nil
}
func (f *fakeShards) ShardCount() uint32 { return 2 }
func (f *fakeShards) Apply(_ context.Context, id uint32, _ *fsmpb.Command) (*fsmpb.Result, error) {
	if id != 0 {
		return nil, errNotLeader
	}
	return &fsmpb.Result{}, nil
}
func (f *fakeShards) Receive(_ context.Context, id uint32, _ *fsmpb.Receive) (*fsmpb.Result, error) {
	return f.Apply(context.Background(), id, nil)
}
func (f *fakeShards) Wait(ctx context.Context, id uint32, queue string) error {
	if id != 0 {
		return errNotLeader
	}
	f.waited <- queue
	if queue == "ready" {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}
func (f *fakeShards) Read(context.Context, uint32, *peerpb.ShardReadRequest) (*peerpb.ShardReadResponse, error) {
	return &peerpb.ShardReadResponse{}, nil
}
func (f *fakeShards) Digest(id uint32) ([32]byte, uint64, error) {
	if id != 0 {
		return [32]byte{}, 0, ErrNoReplica
	}
	return [32]byte{1}, 7, nil
}

type fakeNode struct{}

func (fakeNode) NodeID() string                                         { return "n1" }
func (fakeNode) AppendAudit(context.Context, *metapb.AuditRecord) error { return nil }
func (fakeNode) ReplicaStatus(group string) (*peerpb.ReplicaStatusResponse, error) {
	return nil, ErrNoReplica
}
func (fakeNode) Known(string) *peerpb.KnownResponse { return &peerpb.KnownResponse{HasState: true} }
func (fakeNode) Repair(context.Context) []*peerpb.GroupRepair {
	return []*peerpb.GroupRepair{{Group: "shard-0"}}
}
func (fakeNode) ChangeGroup(context.Context, string, peerpb.GroupChangeRequest_Op, string, string) (uint64, error) {
	return 0, errNotLeader
}
func (fakeNode) BackupPiece(context.Context, string, func(*peerpb.BackupChunk) error) error {
	return errNotLeader
}
func (fakeNode) ShardDigest(context.Context, *peerpb.ShardDigestRequest) (*peerpb.ShardDigestResponse, error) {
	return nil, shard.ErrNoCheckpoint
}

// toStatus stands in for server/errors.go: a refusal names leader n2.
func toStatus(ctx context.Context, err error) error {
	if errors.Is(err, errNotLeader) {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(LeaderTrailer, "n2=127.0.0.1:1"))
	}
	return status.Error(codes.Unavailable, err.Error())
}

func serve(t *testing.T, shards *fakeShards) (addr string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	NewService(fakeNode{}, shards, toStatus).Register(gs)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}

func newClient(t *testing.T) *Client {
	t.Helper()
	c := NewClient(liveness.Config{}, nil)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestServiceValidatesAndMapsErrors(t *testing.T) {
	shards := &fakeShards{ready: true, waited: make(chan string, 10)}
	pc, err := newClient(t).peer(serve(t, shards))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := &fsmpb.Command{Cmd: &fsmpb.Command_Enqueue{Enqueue: &fsmpb.Enqueue{Queue: "q"}}}
	cases := []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"apply", func() error {
			_, err := pc.ShardApply(ctx, &peerpb.ShardApplyRequest{ShardId: 0, Command: cmd})
			return err
		}, codes.OK},
		{"apply without a command", func() error { _, err := pc.ShardApply(ctx, &peerpb.ShardApplyRequest{ShardId: 0}); return err }, codes.InvalidArgument},
		{"apply beyond the shard map", func() error {
			_, err := pc.ShardApply(ctx, &peerpb.ShardApplyRequest{ShardId: 2, Command: cmd})
			return err
		}, codes.InvalidArgument},
		{"apply where not leader", func() error {
			_, err := pc.ShardApply(ctx, &peerpb.ShardApplyRequest{ShardId: 1, Command: cmd})
			return err
		}, codes.Unavailable},
		{"receive of nothing", func() error {
			_, err := pc.ShardReceive(ctx, &peerpb.ShardReceiveRequest{ShardId: 0, Receive: &fsmpb.Receive{Queue: "q"}})
			return err
		}, codes.InvalidArgument},
		{"receive", func() error {
			_, err := pc.ShardReceive(ctx, &peerpb.ShardReceiveRequest{ShardId: 0, Receive: &fsmpb.Receive{Queue: "q", Max: 1}})
			return err
		}, codes.OK},
		{"wait beyond the bound", func() error {
			_, err := pc.ShardWait(ctx, &peerpb.ShardWaitRequest{ShardId: 0, Queue: "q", WaitMs: MaxWait.Milliseconds() + 1})
			return err
		}, codes.InvalidArgument},
		{"negative wait", func() error {
			_, err := pc.ShardWait(ctx, &peerpb.ShardWaitRequest{ShardId: 0, Queue: "q", WaitMs: -1})
			return err
		}, codes.InvalidArgument},
		{"digest of no replica", func() error { _, err := pc.ShardDigest(ctx, &peerpb.ShardDigestRequest{ShardId: 1}); return err }, codes.NotFound},
		{"checkpoint digest not recorded", func() error {
			_, err := pc.ShardDigest(ctx, &peerpb.ShardDigestRequest{ShardId: 0, Checkpoint: 3})
			return err
		}, codes.NotFound},
		{"known without a node", func() error { _, err := pc.Known(ctx, &peerpb.KnownRequest{}); return err }, codes.InvalidArgument},
		{"group change without an op", func() error {
			_, err := pc.GroupChange(ctx, &peerpb.GroupChangeRequest{Group: "meta", NodeId: "n3"})
			return err
		}, codes.InvalidArgument},
		{"repair of another node", func() error { _, err := pc.RepairLocal(ctx, &peerpb.RepairLocalRequest{NodeId: "n2"}); return err }, codes.FailedPrecondition},
		{"repair", func() error { _, err := pc.RepairLocal(ctx, &peerpb.RepairLocalRequest{NodeId: "n1"}); return err }, codes.OK},
	}
	for _, c := range cases {
		if got := status.Code(c.call()); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}

	// A wait that runs its course is an answer (not ready), not an error;
	// one that finds messages says so.
	resp, err := pc.ShardWait(ctx, &peerpb.ShardWaitRequest{ShardId: 0, Queue: "idle", WaitMs: 50})
	if err != nil || resp.GetReady() {
		t.Fatalf("wait on an idle queue = %v, %v; want not ready, no error", resp, err)
	}
	resp, err = pc.ShardWait(ctx, &peerpb.ShardWaitRequest{ShardId: 0, Queue: "ready", WaitMs: 1000})
	if err != nil || !resp.GetReady() {
		t.Fatalf("wait on a ready queue = %v, %v; want ready", resp, err)
	}
	d, err := pc.ShardDigest(ctx, &peerpb.ShardDigestRequest{ShardId: 0})
	if err != nil || d.GetNodeId() != "n1" || d.GetAppliedIndex() != 7 || len(d.GetDigest()) != 32 {
		t.Fatalf("digest = %v, %v", d, err)
	}
}

// Until the shard map is loaded every shard call is refused through the
// status function (certainly not applied), never INVALID_ARGUMENT.
func TestServiceRefusesWhileNotReady(t *testing.T) {
	pc, err := newClient(t).peer(serve(t, &fakeShards{waited: make(chan string, 1)}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := pc.ShardRead(ctx, &peerpb.ShardReadRequest{ShardId: 5}); status.Code(err) != codes.Unavailable {
		t.Fatalf("read while starting = %v, want UNAVAILABLE", err)
	}
}

// Forward reports a refusal with the leader hint from the trailer, and an
// address nobody serves as a path failure that was not sent.
func TestForwardRefusalAndUnreachablePeer(t *testing.T) {
	c := newClient(t)
	addr := serve(t, &fakeShards{ready: true, waited: make(chan string, 1)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	apply := func(id uint32) func(context.Context, peerpb.PeerClient, ...grpc.CallOption) (*peerpb.ShardApplyResponse, error) {
		return func(ctx context.Context, pc peerpb.PeerClient, o ...grpc.CallOption) (*peerpb.ShardApplyResponse, error) {
			return pc.ShardApply(ctx, &peerpb.ShardApplyRequest{ShardId: id, Command: &fsmpb.Command{Cmd: &fsmpb.Command_Enqueue{}}}, o...)
		}
	}
	if _, refused, _, err := Forward(ctx, c, 0, "n1", addr, apply(0)); err != nil || refused {
		t.Fatalf("forward to the leader: refused %v, %v", refused, err)
	}
	_, refused, hint, err := Forward(ctx, c, 1, "n1", addr, apply(1))
	if !refused || hint != "n2=127.0.0.1:1" || status.Code(err) != codes.Unavailable {
		t.Fatalf("forward to a non-leader: refused %v hint %q err %v", refused, hint, err)
	}
	_, _, _, err = Forward(ctx, c, 0, "n3", "", apply(0))
	var pe *Error
	if !errors.As(err, &pe) || pe.Sent || pe.Peer != "n3" {
		t.Fatalf("forward without an address: %v; want an unsent *Error for n3", err)
	}
}
