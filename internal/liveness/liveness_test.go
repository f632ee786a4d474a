package liveness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/raftq/raftq/internal/grayproxy"
	"github.com/raftq/raftq/peer/peerpb"
)

// The probes of these tests are quick so the tests are; a probe is a
// health check on loopback, answered in well under 100 ms even on a
// loaded machine. The servers register no health service: Unimplemented
// is an answer too.
var testCfg = Config{After: 100 * time.Millisecond, Timeout: 500 * time.Millisecond}

// slowNode answers ShardApply after holding each call for delay, or when
// the call ends.
type slowNode struct {
	peerpb.UnimplementedPeerServer
	delay time.Duration
	calls atomic.Int32
}

func (n *slowNode) ShardApply(ctx context.Context, _ *peerpb.ShardApplyRequest) (*peerpb.ShardApplyResponse, error) {
	n.calls.Add(1)
	select {
	case <-time.After(n.delay):
		return &peerpb.ShardApplyResponse{}, nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

func serve(t *testing.T, n *slowNode) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	peerpb.RegisterPeerServer(gs, n)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}

func dial(t *testing.T, addr string) (*grpc.ClientConn, *Peer) {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc, New(cc, testCfg)
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// guarded makes one ShardApply call under p's guard.
func guarded(ctx context.Context, cc *grpc.ClientConn, p *Peer) (callErr, silent error) {
	if err := p.Ready(ctx); err != nil {
		return err, nil
	}
	gctx, stop := p.Guard(ctx)
	_, callErr = peerpb.NewPeerClient(cc).ShardApply(gctx, &peerpb.ShardApplyRequest{})
	return callErr, stop()
}

// A call that waits far longer than a probe takes goes on while its peer
// answers probes: slow is not dead.
func TestGuardLetsASlowCallFinishWhileThePeerAnswers(t *testing.T) {
	n := &slowNode{delay: 2 * (testCfg.After + testCfg.Timeout)}
	cc, p := dial(t, serve(t, n))
	callErr, silent := guarded(ctxT(t, 30*time.Second), cc, p)
	if callErr != nil || silent != nil {
		t.Fatalf("slow call through a live peer: err %v, silent %v; want it to finish", callErr, silent)
	}
	if p.Silent() {
		t.Fatal("peer marked silent after answering every probe")
	}
}

// A call out when its peer falls silent ends with ErrSilent long before
// its own deadline; after that nothing is sent to the peer (Ready fails at
// once) until it answers a probe again.
func TestGuardCutsACallWhenThePeerFallsSilent(t *testing.T) {
	n := &slowNode{delay: time.Hour}
	px := grayproxy.Start(t, serve(t, n))
	cc, p := dial(t, px.Addr)
	ctx := ctxT(t, time.Minute)
	if err := p.Ready(ctx); err != nil {
		t.Fatalf("Ready before the fault: %v", err)
	}
	// The answers are lost; the request still arrives.
	px.Drop(false, true)
	callErr, silent := guarded(ctx, cc, p)
	if !errors.Is(silent, ErrSilent) || status.Code(callErr) != codes.Canceled {
		t.Fatalf("call to a silent peer: err %v, silent %v; want Canceled and ErrSilent", callErr, silent)
	}
	if ctx.Err() != nil {
		t.Fatal("the call ran to its caller's deadline")
	}
	if got := n.calls.Load(); got != 1 {
		t.Fatalf("peer saw %d calls, want the 1 whose answer was lost", got)
	}
	if err := p.Ready(ctx); !errors.Is(err, ErrSilent) {
		t.Fatalf("Ready on a silent peer = %v, want ErrSilent without sending", err)
	}
	px.Drop(false, false)
	// Ready's background probes find the peer again. The healed stream may
	// have lost part of a frame, in which case the connection is replaced.
	for {
		if err := p.Ready(ctx); err == nil {
			break
		} else if ctx.Err() != nil {
			t.Fatalf("peer never usable again after healing: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The other direction: requests are lost, so the call never reaches the
// peer, and the guard cannot tell that from a lost answer: silent all the
// same.
func TestGuardCutsACallWhoseRequestsAreLost(t *testing.T) {
	n := &slowNode{delay: time.Hour}
	px := grayproxy.Start(t, serve(t, n))
	cc, p := dial(t, px.Addr)
	ctx := ctxT(t, time.Minute)
	if err := p.Ready(ctx); err != nil {
		t.Fatalf("Ready before the fault: %v", err)
	}
	px.Drop(true, false)
	_, silent := guarded(ctx, cc, p)
	if !errors.Is(silent, ErrSilent) {
		t.Fatalf("call whose request was lost: silent %v, want ErrSilent", silent)
	}
	if got := n.calls.Load(); got != 0 {
		t.Fatalf("peer saw %d calls through a proxy dropping requests", got)
	}
}

// Nothing listening: Ready fails without sending, as unreachable.
func TestReadyOnAPeerThatCannotBeReached(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	_, p := dial(t, addr)
	if err := p.Ready(ctxT(t, 30*time.Second)); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Ready with nothing listening = %v, want ErrUnreachable", err)
	}
}

// A new connection whose handshake never completes (the server's bytes are
// lost) is not waited for beyond Timeout.
func TestReadyBoundsAConnectThatHangs(t *testing.T) {
	px := grayproxy.Start(t, serve(t, &slowNode{}))
	px.Drop(false, true)
	_, p := dial(t, px.Addr)
	ctx := ctxT(t, 30*time.Second)
	if err := p.Ready(ctx); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Ready while the handshake is lost = %v, want ErrUnreachable", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Ready waited out its caller's context")
	}
}

func TestZeroConfigTurnsProbingOff(t *testing.T) {
	n := &slowNode{delay: time.Hour}
	px := grayproxy.Start(t, serve(t, n))
	px.Drop(false, true)
	cc, err := grpc.NewClient(px.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	p := New(cc, Config{After: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	callErr, silent := guarded(ctx, cc, p)
	if silent != nil || status.Code(callErr) != codes.DeadlineExceeded {
		t.Fatalf("unguarded call: err %v, silent %v; want its own deadline", callErr, silent)
	}
}

func TestAnswered(t *testing.T) {
	for code, want := range map[codes.Code]bool{
		codes.OK: true, codes.Unimplemented: true, codes.NotFound: true, codes.Internal: true,
		codes.DeadlineExceeded: false, codes.Unavailable: false, codes.Canceled: false,
	} {
		if got := answered(status.Error(code, "x")); got != want {
			t.Errorf("answered(%v) = %v, want %v", code, got, want)
		}
	}
}

// A silence nobody has checked for a while (no calls wanted the peer) is
// checked again before a call is refused on it: the first call after the
// peer recovered goes through. A fresh one is not: calls are refused at
// once.
func TestAnOldSilenceIsCheckedAgain(t *testing.T) {
	_, p := dial(t, serve(t, &slowNode{}))
	ctx := ctxT(t, time.Minute)
	if err := p.Ready(ctx); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	silence := func(at time.Time) {
		p.mu.Lock()
		p.setSilentLocked(fmt.Errorf("%w: a probe at %v went unanswered", ErrSilent, at))
		p.probedAt = at
		p.mu.Unlock()
	}
	silence(time.Now())
	if err := p.Ready(ctx); !errors.Is(err, ErrSilent) {
		t.Fatalf("Ready right after an unanswered probe = %v, want ErrSilent", err)
	}
	silence(time.Now().Add(-time.Minute))
	if err := p.Ready(ctx); err != nil {
		t.Fatalf("Ready on a silence a minute old, peer answering = %v, want nil", err)
	}
}
