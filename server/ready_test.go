package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/cluster"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/meta/metapb"
	"github.com/raftq/raftq/peer"
	"github.com/raftq/raftq/peer/peerpb"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/raftstore"
	"github.com/raftq/raftq/router"
	"github.com/raftq/raftq/shard"
	"github.com/raftq/raftq/wire"
)

// startingNode is a node that has not loaded the shard map yet: its meta
// replica is open but knows nothing (never bootstrapped, no leader), it
// hosts no shard and knows no peer. count is its shard count (0: no map).
type startingNode struct {
	meta  *meta.Store
	count atomic.Uint32
}

func (n *startingNode) NodeID() string                                         { return "n2" }
func (n *startingNode) ShardCount() uint32                                     { return n.count.Load() }
func (n *startingNode) SlotTable() wire.SlotTable                              { return wire.DefaultSlotTable(n.count.Load()) }
func (n *startingNode) DedupPeers(string, uint32) []router.PriorOwner          { return nil }
func (n *startingNode) LocalShard(uint32) *shard.Shard                         { return nil }
func (n *startingNode) ShardReplicas(uint32) []string                          { return nil }
func (n *startingNode) ShardLeader(uint32) (string, string, bool)              { return "", "", false }
func (n *startingNode) NoteLeader(uint32, string)                              {}
func (n *startingNode) MemberGRPC(string) (string, bool)                       { return "", false }
func (n *startingNode) MemberPeer(string) (string, bool)                       { return "", false }
func (n *startingNode) Meta() *meta.Store                                      { return n.meta }
func (n *startingNode) Members() []cluster.Member                              { return nil }
func (n *startingNode) Known(string) *peerpb.KnownResponse                     { return &peerpb.KnownResponse{} }
func (n *startingNode) AppendAudit(context.Context, *metapb.AuditRecord) error { return nil }

func (n *startingNode) ReplicaStatus(string) (*peerpb.ReplicaStatusResponse, error) {
	return nil, peer.ErrNoReplica
}
func (n *startingNode) Repair(context.Context) []*peerpb.GroupRepair {
	return nil
}
func (n *startingNode) Damaged() map[string]*raftstore.DamageError { return nil }
func (n *startingNode) Rebalance(bool) (cluster.RebalanceStatus, error) {
	return cluster.RebalanceStatus{}, &raftgroup.NotLeaderError{Group: "meta"}
}
func (n *startingNode) SetShardCount(context.Context, uint32, bool) (cluster.GrowStatus, error) {
	return cluster.GrowStatus{}, &raftgroup.NotLeaderError{Group: "meta"}
}
func (n *startingNode) ChangeGroup(context.Context, string, peerpb.GroupChangeRequest_Op, string, string) (uint64, error) {
	return 0, &raftgroup.NotLeaderError{}
}
func (n *startingNode) BackupPiece(context.Context, string, func(*peerpb.BackupChunk) error) error {
	return &raftgroup.NotLeaderError{}
}
func (n *startingNode) Backup(context.Context, func(cluster.BackupInfo) error, func(*peerpb.BackupChunk) error) error {
	return router.ErrNotReady
}
func (n *startingNode) ShardDigest(context.Context, *peerpb.ShardDigestRequest) (*peerpb.ShardDigestResponse, error) {
	return nil, shard.ErrNoCheckpoint
}

// serveStarting runs the real services of a starting node on loopback
// ports, the client services on one and the peer service on another, as
// raftq-node does, and returns a connection to each.
func serveStarting(t *testing.T) (node *startingNode, client, peer *grpc.ClientConn) {
	t.Helper()
	_, tr := raft.NewInmemTransport("n2")
	node = &startingNode{meta: openMeta(t, tr)}
	client, peer = serveBoth(t, node)
	return node, client, peer
}

// openMeta opens node n2's meta replica on tr in a temporary directory,
// shut down when the test ends.
func openMeta(t testing.TB, tr raft.Transport) *meta.Store {
	t.Helper()
	ms, err := meta.Open(meta.Config{NodeID: "n2", Dir: t.TempDir(), Transport: tr, Logger: discard()})
	if err != nil {
		t.Fatalf("open meta: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = ms.Shutdown(ctx)
	})
	return ms
}

// leadingMeta opens node n2's meta replica as the only voter of its
// group and waits until it leads.
func leadingMeta(t testing.TB) *meta.Store {
	t.Helper()
	addr, tr := raft.NewInmemTransport("")
	ms := openMeta(t, tr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := ms.Bootstrap(ctx, []raft.Server{{Suffrage: raft.Voter, ID: "n2", Address: addr}}); err != nil {
		t.Fatal(err)
	}
	for !ms.IsLeader() {
		select {
		case <-ctx.Done():
			t.Fatal("meta replica never led its one-voter group")
		case <-time.After(20 * time.Millisecond):
		}
	}
	return ms
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// serve runs the real client services of node on a loopback port and
// returns a connection to them. The router waits 200 ms for a shard leader.
func serve(t *testing.T, node Node) *grpc.ClientConn {
	t.Helper()
	client, _ := serveBoth(t, node)
	return client
}

// serveBoth runs the client services and the peer service of node on two
// loopback ports, as raftq-node does, and returns a connection to each.
func serveBoth(t *testing.T, node Node) (client, peer *grpc.ClientConn) {
	t.Helper()
	logger := discard()
	rt := router.New(node, router.Options{Logger: logger, LeaderWait: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rt.Close() })
	srv := New(node, rt, nil, logger)
	gs, ps := grpc.NewServer(), grpc.NewServer()
	srv.Register(gs)
	srv.Peer().Register(ps)
	return serveOn(t, gs), serveOn(t, ps)
}

func serveOn(t *testing.T, gs *grpc.Server) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

type call struct {
	name string
	do   func(ctx context.Context, opts ...grpc.CallOption) error
}

// entryPoints calls every service method that needs the shard map with a
// request that is valid once the map is known (shard 0 exists in every
// cluster).
func entryPoints(cc, pc *grpc.ClientConn) []call {
	msgs := raftqv1.NewMessagesClient(cc)
	qs := raftqv1.NewQueuesClient(cc)
	dlq := raftqv1.NewDeadLettersClient(cc)
	node := peerpb.NewPeerClient(pc)
	receipt := wire.Receipt{Shard: 0, ID: 1, Epoch: 1, Term: 1}.String()
	id := wire.MessageID{Shard: 0, ID: 1}.String()
	enq := &fsmpb.Command{Cmd: &fsmpb.Command_Enqueue{Enqueue: &fsmpb.Enqueue{Queue: "jobs", Messages: []*fsmpb.NewMessage{{Body: []byte("x")}}}}}
	return []call{
		// The send that crashed restarting nodes: no group, no dedup key.
		{"Send", func(ctx context.Context, o ...grpc.CallOption) error {
			_, err := msgs.Send(ctx, &raftqv1.SendRequest{Queue: "jobs", Body: []byte("x")}, o...)
			return err
		}},
		{"Send grouped", func(ctx context.Context, o ...grpc.CallOption) error {
			_, err := msgs.Send(ctx, &raftqv1.SendRequest{Queue: "jobs", Body: []byte("x"), GroupId: "g"}, o...)
			return err
		}},
		{"Send keyed", func(ctx context.Context, o ...grpc.CallOption) error {
			_, err := msgs.Send(ctx, &raftqv1.SendRequest{Queue: "jobs", Body: []byte("x"), DedupKey: "k"}, o...)
			return err
		}},
		{"SendBatch", func(ctx context.Context, o ...grpc.CallOption) error {
			_, err := msgs.SendBatch(ctx, &raftqv1.SendBatchRequest{Queue: "jobs", Messages: []*raftqv1.SendRequest{{Body: []byte("x")}, {Body: []byte("y"), GroupId: "g"}}}, o...)
			return err
		}},
		{"Receive", func(ctx context.Context, o ...grpc.CallOption) error {
			_, err := msgs.Receive(ctx, &raftqv1.ReceiveRequest{Queue: "jobs", MaxMessages: 10, WaitMs: 5000}, o...)
			return err
		}},
		{"Ack", func(ctx context.Context, o ...grpc.CallOption) error {
			_, err := msgs.Ack(ctx, &raftqv1.AckRequest{Receipts: []string{receipt}}, o...)
			return err
		}},
		{"Nack", func(ctx context.Context, o ...grpc.CallOption) error {
			_, err := msgs.Nack(ctx, &raftqv1.NackRequest{Receipt: receipt}, o...)
			return err
		}},
		{"ExtendLease", func(ctx context.Context, o ...grpc.CallOption) error {
			_, err := msgs.ExtendLease(ctx, &raftqv1.ExtendLeaseRequest{Receipt: receipt, VisibilityTimeoutMs: 1000}, o...)
			return err
		}},
		{"DeadLetter", func(ctx context.Context, o ...grpc.CallOption) error {
			_, err := msgs.DeadLetter(ctx, &raftqv1.DeadLetterRequest{Receipt: receipt}, o...)
			return err
		}},
		{"GetMessage", func(ctx context.Context, o ...grpc.CallOption) error {
			_, err := msgs.GetMessage(ctx, &raftqv1.GetMessageRequest{MessageId: id}, o...)
			return err
		}},
		{"CancelMessage", func(ctx context.Context, o ...grpc.CallOption) error {
			_, err := msgs.CancelMessage(ctx, &raftqv1.CancelMessageRequest{MessageId: id}, o...)
			return err
		}},
		{"GetQueue", func(ctx context.Context, o ...grpc.CallOption) error {
			_, err := qs.GetQueue(ctx, &raftqv1.GetQueueRequest{Name: "jobs"}, o...)
			return err
		}},
		{"QueueStats", func(ctx context.Context, o ...grpc.CallOption) error {
			_, err := qs.QueueStats(ctx, &raftqv1.QueueStatsRequest{Name: "jobs"}, o...)
			return err
		}},
		{"PurgeQueue", func(ctx context.Context, o ...grpc.CallOption) error {
			_, err := qs.PurgeQueue(ctx, &raftqv1.PurgeQueueRequest{Name: "jobs"}, o...)
			return err
		}},
		{"ListDead", func(ctx context.Context, o ...grpc.CallOption) error {
			_, err := dlq.ListDead(ctx, &raftqv1.ListDeadRequest{Queue: "jobs"}, o...)
			return err
		}},
		{"Redrive", func(ctx context.Context, o ...grpc.CallOption) error {
			_, err := dlq.Redrive(ctx, &raftqv1.RedriveRequest{Queue: "jobs", MessageIds: []string{id}}, o...)
			return err
		}},
		{"Discard", func(ctx context.Context, o ...grpc.CallOption) error {
			_, err := dlq.Discard(ctx, &raftqv1.DiscardRequest{Queue: "jobs"}, o...)
			return err
		}},
		{"Peer.ShardApply", func(ctx context.Context, o ...grpc.CallOption) error {
			_, err := node.ShardApply(ctx, &peerpb.ShardApplyRequest{ShardId: 0, Command: enq}, o...)
			return err
		}},
		{"Peer.ShardReceive", func(ctx context.Context, o ...grpc.CallOption) error {
			_, err := node.ShardReceive(ctx, &peerpb.ShardReceiveRequest{ShardId: 0, Receive: &fsmpb.Receive{Queue: "jobs", Max: 1}}, o...)
			return err
		}},
		{"Peer.ShardWait", func(ctx context.Context, o ...grpc.CallOption) error {
			_, err := node.ShardWait(ctx, &peerpb.ShardWaitRequest{ShardId: 0, Queue: "jobs", WaitMs: 1000}, o...)
			return err
		}},
		{"Peer.ShardRead", func(ctx context.Context, o ...grpc.CallOption) error {
			_, err := node.ShardRead(ctx, &peerpb.ShardReadRequest{ShardId: 0, Query: &peerpb.ShardReadRequest_StatsQueue{StatsQueue: "jobs"}}, o...)
			return err
		}},
		{"Peer.ShardDigest", func(ctx context.Context, o ...grpc.CallOption) error {
			_, err := node.ShardDigest(ctx, &peerpb.ShardDigestRequest{ShardId: 0}, o...)
			return err
		}},
	}
}

// A node that has not loaded the shard map answers every call that needs
// it UNAVAILABLE, names itself as starting, and marks the call certainly
// not applied (the raftq-leader trailer), so clients and forwarding nodes
// retry at once. It used to crash on a send (integer divide by zero) and
// answer forwarded calls INVALID_ARGUMENT, which clients take as final.
func TestStartingNodeAnswersUnavailable(t *testing.T) {
	_, cc, pc := serveStarting(t)
	for _, c := range entryPoints(cc, pc) {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var trailer metadata.MD
			err := c.do(ctx, grpc.Trailer(&trailer))
			st, _ := status.FromError(err)
			if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "node n2 is starting") {
				t.Fatalf("%s = %v, want UNAVAILABLE saying node n2 is starting", c.name, err)
			}
			if _, refused := trailer[router.LeaderTrailer]; !refused {
				t.Fatalf("%s: no %s trailer: the caller cannot know nothing was applied", c.name, router.LeaderTrailer)
			}
		})
	}
}

// Input that is wrong whatever the map says stays INVALID_ARGUMENT while
// the node starts; once the map is loaded, a receipt or id naming a shard
// beyond it is INVALID_ARGUMENT too, not a readiness problem.
func TestInvalidInputStaysInvalid(t *testing.T) {
	node, cc, _ := serveStarting(t)
	msgs := raftqv1.NewMessagesClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := msgs.Send(ctx, &raftqv1.SendRequest{Queue: "", Body: []byte("x")}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("send to an unnamed queue while starting = %v, want INVALID_ARGUMENT", err)
	}
	if _, err := msgs.Ack(ctx, &raftqv1.AckRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("ack of no receipts while starting = %v, want INVALID_ARGUMENT", err)
	}
	node.count.Store(2)
	beyond := wire.Receipt{Shard: 5, ID: 1, Epoch: 1}.String()
	resp, err := msgs.Ack(ctx, &raftqv1.AckRequest{Receipts: []string{beyond}})
	if err != nil || len(resp.GetResults()) != 1 || codes.Code(resp.GetResults()[0].GetCode()) != codes.InvalidArgument {
		t.Fatalf("ack of a receipt for shard 5 of 2 = %v, %v; want an INVALID_ARGUMENT item", resp, err)
	}
	if _, err := msgs.Nack(ctx, &raftqv1.NackRequest{Receipt: beyond}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("nack of a receipt for shard 5 of 2 = %v, want INVALID_ARGUMENT", err)
	}
	if _, err := msgs.GetMessage(ctx, &raftqv1.GetMessageRequest{MessageId: wire.MessageID{Shard: 5, ID: 1}.String()}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("get message 5-1 of 2 shards = %v, want INVALID_ARGUMENT", err)
	}
}

// The client port does not serve the node-to-node protocol: a peer call
// there is UNIMPLEMENTED, while the peer port answers it.
func TestPeerServiceIsNotOnTheClientPort(t *testing.T) {
	node, cc, pc := serveStarting(t)
	node.count.Store(1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := &peerpb.KnownRequest{NodeId: "n1"}
	if _, err := peerpb.NewPeerClient(cc).Known(ctx, req); status.Code(err) != codes.Unimplemented {
		t.Fatalf("Peer.Known on the client port = %v, want UNIMPLEMENTED", err)
	}
	if _, err := peerpb.NewPeerClient(pc).Known(ctx, req); err != nil {
		t.Fatalf("Peer.Known on the peer port: %v", err)
	}
}
