package router

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/internal/grayproxy"
	"github.com/raftq/raftq/internal/liveness"
	"github.com/raftq/raftq/peer/peerpb"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/shard"
	"github.com/raftq/raftq/wire"
)

// fakeTopo is one shard (0) that this node ("a") does not host.
type fakeTopo struct {
	mu       sync.Mutex
	leader   string // "" when unknown
	replicas []string
	addrs    map[string]string
}

func (f *fakeTopo) NodeID() string                         { return "a" }
func (f *fakeTopo) ShardCount() uint32                     { return 1 }
func (f *fakeTopo) SlotTable() wire.SlotTable              { return wire.DefaultSlotTable(1) }
func (f *fakeTopo) DedupPeers(string, uint32) []PriorOwner { return nil }
func (f *fakeTopo) LocalShard(uint32) *shard.Shard         { return nil }
func (f *fakeTopo) ShardReplicas(uint32) []string          { return f.replicas }
func (f *fakeTopo) NoteLeader(_ uint32, id string)         { f.mu.Lock(); f.leader = id; f.mu.Unlock() }
func (f *fakeTopo) MemberGRPC(id string) (string, bool)    { a, ok := f.addrs[id]; return a, ok }
func (f *fakeTopo) MemberPeer(id string) (string, bool)    { a, ok := f.addrs[id]; return a, ok }

func (f *fakeTopo) ShardLeader(uint32) (string, string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.leader == "" {
		return "", "", false
	}
	return f.leader, f.addrs[f.leader], true
}

// fakeLeader serves forwarded shard calls as a shard's leader: applies
// succeed at once, waits last their full wait.
type fakeLeader struct {
	peerpb.UnimplementedPeerServer
	applies atomic.Int32
}

func (n *fakeLeader) ShardApply(context.Context, *peerpb.ShardApplyRequest) (*peerpb.ShardApplyResponse, error) {
	n.applies.Add(1)
	return &peerpb.ShardApplyResponse{Result: &fsmpb.Result{}}, nil
}

func (n *fakeLeader) ShardWait(ctx context.Context, req *peerpb.ShardWaitRequest) (*peerpb.ShardWaitResponse, error) {
	select {
	case <-time.After(time.Duration(req.GetWaitMs()) * time.Millisecond):
		return &peerpb.ShardWaitResponse{}, nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

func serveLeader(t *testing.T) (*fakeLeader, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &fakeLeader{}
	gs := grpc.NewServer()
	peerpb.RegisterPeerServer(gs, n)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return n, lis.Addr().String()
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	return addr
}

// Probes quick enough for tests; a health check on loopback answers in
// well under 100 ms on a loaded machine.
var testProbe = liveness.Config{After: 100 * time.Millisecond, Timeout: 500 * time.Millisecond}

func newTestRouter(t *testing.T, topo Topology) *Router {
	t.Helper()
	r := New(topo, Options{LeaderWait: time.Minute, PeerProbe: testProbe})
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func enqueue() *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_Enqueue{Enqueue: &fsmpb.Enqueue{Queue: "q"}}}
}

func peerError(t *testing.T, err error) *PeerError {
	t.Helper()
	var pe *PeerError
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v (%T), want a *PeerError", err, err)
	}
	return pe
}

// A forward whose answers are lost (the leader still receives it) ends
// within the probe's bound, not the caller's deadline, as outcome unknown
// with the leader as hint: the leader did get it. The next forward is not
// sent at all, and says so. Once the path heals, forwards go through.
func TestForwardCutOffWhileOutIsUnknownThenNotSent(t *testing.T) {
	leader, addr := serveLeader(t)
	px := grayproxy.Start(t, addr)
	topo := &fakeTopo{leader: "b", replicas: []string{"a", "b", "c"}, addrs: map[string]string{"b": px.Addr}}
	r := newTestRouter(t, topo)
	ctx := ctxT(t, time.Minute)
	if _, err := r.Apply(ctx, 0, enqueue()); err != nil {
		t.Fatalf("forward before the fault: %v", err)
	}
	px.Drop(false, true)
	_, err := r.Apply(ctx, 0, enqueue())
	pe := peerError(t, err)
	if !pe.Sent || pe.LeaderID != "b" || pe.LeaderAddr != px.Addr || pe.Peer != "b" {
		t.Fatalf("forward cut off while out: %+v; want Sent, leader and peer b at %s", pe, px.Addr)
	}
	if ctx.Err() != nil {
		t.Fatal("the forward waited for its caller's deadline")
	}
	if got := leader.applies.Load(); got != 2 {
		t.Fatalf("leader saw %d applies, want 2: the cut-off one arrived, so its outcome is unknown", got)
	}
	_, err = r.Apply(ctx, 0, enqueue())
	if pe := peerError(t, err); pe.Sent || pe.LeaderID != "b" {
		t.Fatalf("forward to a silent leader: %+v; want not sent, leader b", pe)
	}
	if got := leader.applies.Load(); got != 2 {
		t.Fatalf("leader saw %d applies; the forward to a silent leader must not leave", got)
	}
	px.Drop(false, false)
	for {
		if _, err = r.Apply(ctx, 0, enqueue()); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("forwards never resumed after healing: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Requests lost on the way (the leader's receive path is cut): the same
// answer, since this node cannot tell a lost request from a lost reply.
func TestForwardWhoseRequestIsLostIsUnknown(t *testing.T) {
	leader, addr := serveLeader(t)
	px := grayproxy.Start(t, addr)
	topo := &fakeTopo{leader: "b", replicas: []string{"a", "b", "c"}, addrs: map[string]string{"b": px.Addr}}
	r := newTestRouter(t, topo)
	ctx := ctxT(t, time.Minute)
	if _, err := r.Apply(ctx, 0, enqueue()); err != nil {
		t.Fatalf("forward before the fault: %v", err)
	}
	px.Drop(true, false)
	if _, err := r.Apply(ctx, 0, enqueue()); !peerError(t, err).Sent {
		t.Fatalf("forward whose request was lost: %v; want outcome unknown", err)
	}
	if got := leader.applies.Load(); got != 1 {
		t.Fatalf("leader saw %d applies through a path dropping requests", got)
	}
}

// A leader that refuses connections: certainly not sent, and named.
func TestForwardToAnUnreachableLeaderIsNotSent(t *testing.T) {
	dead := deadAddr(t)
	topo := &fakeTopo{leader: "b", replicas: []string{"a", "b", "c"}, addrs: map[string]string{"b": dead}}
	r := newTestRouter(t, topo)
	_, err := r.Apply(ctxT(t, time.Minute), 0, enqueue())
	if pe := peerError(t, err); pe.Sent || pe.LeaderID != "b" || pe.LeaderAddr != dead {
		t.Fatalf("forward to a leader refusing connections: %+v; want not sent, leader b at %s", pe, dead)
	}
}

// With no leader known and no other replica reachable, the call is
// answered at once (not sent) instead of waiting LeaderWait (a minute
// here) for an election this node could not see.
func TestNoReachableReplicaIsNotWaitedFor(t *testing.T) {
	topo := &fakeTopo{replicas: []string{"a", "b", "c"}, addrs: map[string]string{"b": deadAddr(t)}} // c: no address
	r := newTestRouter(t, topo)
	ctx := ctxT(t, 30*time.Second)
	_, err := r.Apply(ctx, 0, enqueue())
	if pe := peerError(t, err); pe.Sent {
		t.Fatalf("no replica reachable: %+v; want not sent", pe)
	}
	if ctx.Err() != nil {
		t.Fatal("the call waited for its caller's deadline")
	}
}

// A long poll through a live leader waits its full time (several probe
// cycles): waiting for messages is not waiting on a dead peer.
func TestLongPollThroughALiveLeaderRunsItsCourse(t *testing.T) {
	_, addr := serveLeader(t)
	topo := &fakeTopo{leader: "b", replicas: []string{"a", "b", "c"}, addrs: map[string]string{"b": addr}}
	r := newTestRouter(t, topo)
	wait := 4 * (testProbe.After + testProbe.Timeout)
	start := time.Now()
	if _, err := r.waitShard(ctxT(t, time.Minute), 0, "q", wait); err != nil {
		t.Fatalf("long poll through a live leader: %v", err)
	}
	if took := time.Since(start); took < wait {
		t.Fatalf("long poll returned after %v, before its %v wait", took, wait)
	}
}

// A long poll whose leader falls silent mid-wait ends (outcome unknown:
// a wait leases nothing, but a forward cannot know its kind)
// instead of running to the end of its wait.
func TestLongPollEndsWhenTheLeaderFallsSilent(t *testing.T) {
	_, addr := serveLeader(t)
	px := grayproxy.Start(t, addr)
	topo := &fakeTopo{leader: "b", replicas: []string{"a", "b", "c"}, addrs: map[string]string{"b": px.Addr}}
	r := newTestRouter(t, topo)
	ctx := ctxT(t, time.Minute)
	const wait = 20 * time.Second
	done := make(chan error, 1)
	go func() {
		_, err := r.waitShard(ctx, 0, "q", wait)
		done <- err
	}()
	time.Sleep(2 * (testProbe.After + testProbe.Timeout)) // parked, and probed at least once
	px.Drop(true, true)
	start := time.Now()
	err := <-done
	if !peerError(t, err).Sent {
		t.Fatalf("long poll on a silent leader: %v; want outcome unknown", err)
	}
	if took := time.Since(start); took >= wait {
		t.Fatalf("long poll ran %v after its leader fell silent", took)
	}
}

// A receive that can reach no shard leader answers at once rather than
// long-polling on a path that cannot deliver anything.
func TestReceiveDoesNotLongPollWhenNoLeaderIsReachable(t *testing.T) {
	topo := &fakeTopo{leader: "b", replicas: []string{"a", "b", "c"}, addrs: map[string]string{"b": deadAddr(t)}}
	r := newTestRouter(t, topo)
	const wait = 20 * time.Second
	start := time.Now()
	_, _, err := r.Receive(ctxT(t, time.Minute), &fsmpb.Receive{Queue: "q", Max: 1}, wait)
	if pe := peerError(t, err); pe.Sent {
		t.Fatalf("receive with no reachable leader: %+v; want not sent", pe)
	}
	if took := time.Since(start); took >= wait {
		t.Fatalf("receive long-polled %v on an unreachable leader", took)
	}
}

// A leader known without a peer address is asked about through the
// replicas, which name it again; the call then waits for the address (or
// an election) with the usual backoff, not in a loop of calls.
func TestLeaderWithoutAddressIsWaitedForNotSpunOn(t *testing.T) {
	refuser := &hintingNode{hint: "c="}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	peerpb.RegisterPeerServer(gs, refuser)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	topo := &fakeTopo{leader: "c", replicas: []string{"a", "b", "c"}, addrs: map[string]string{"b": lis.Addr().String()}}
	r := New(topo, Options{LeaderWait: time.Second, PeerProbe: testProbe})
	t.Cleanup(func() { _ = r.Close() })
	_, err = r.Apply(ctxT(t, time.Minute), 0, enqueue())
	var nl *raftgroup.NotLeaderError
	if !errors.As(err, &nl) {
		t.Fatalf("err = %v, want a *raftgroup.NotLeaderError after LeaderWait", err)
	}
	// With backoff from 20 ms, a second of waiting makes a handful of
	// calls; a loop without sleeping makes thousands.
	if n := refuser.calls.Load(); n > 20 {
		t.Fatalf("replica asked %d times in a second", n)
	}
}

// hintingNode refuses every shard call, naming hint as the leader.
type hintingNode struct {
	peerpb.UnimplementedPeerServer
	hint  string
	calls atomic.Int32
}

func (n *hintingNode) ShardApply(ctx context.Context, _ *peerpb.ShardApplyRequest) (*peerpb.ShardApplyResponse, error) {
	n.calls.Add(1)
	_ = grpc.SetTrailer(ctx, metadata.Pairs(LeaderTrailer, n.hint))
	return nil, status.Error(codes.Unavailable, "not the leader")
}

// A replica that serves a call asked of it with no leader known is the
// leader: the node remembers it for the next call and for the views that
// name shard leaders.
func TestReplicaThatServesIsNotedAsLeader(t *testing.T) {
	n, addr := serveLeader(t)
	topo := &fakeTopo{replicas: []string{"a", "b"}, addrs: map[string]string{"b": addr}}
	r := New(topo, Options{LeaderWait: time.Second, PeerProbe: testProbe})
	t.Cleanup(func() { _ = r.Close() })
	if _, err := r.Apply(ctxT(t, time.Minute), 0, enqueue()); err != nil {
		t.Fatalf("apply through the only other replica: %v", err)
	}
	if id, _, ok := topo.ShardLeader(0); !ok || id != "b" {
		t.Fatalf("leader after b served = %q (known %v), want b", id, ok)
	}
	if got := n.applies.Load(); got != 1 {
		t.Fatalf("b applied %d times, want 1", got)
	}
}
