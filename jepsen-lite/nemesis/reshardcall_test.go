package nemesis

import (
	"context"
	"errors"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
)

// shardCountSvc answers SetShardCount with resp or err, counting calls.
type shardCountSvc struct {
	raftqv1.UnimplementedClusterServer
	resp  *raftqv1.SetShardCountResponse
	err   error
	calls int
}

func (s *shardCountSvc) SetShardCount(context.Context, *raftqv1.SetShardCountRequest) (*raftqv1.SetShardCountResponse, error) {
	s.calls++
	return s.resp, s.err
}

func serveCluster(t *testing.T, svc raftqv1.ClusterServer) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	raftqv1.RegisterClusterServer(srv, svc)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// A node that cannot answer is passed over; the first answer is the
// growth, its moves and phases as the API gives them; a definite refusal
// (FAILED_PRECONDITION, UNIMPLEMENTED) wraps ErrRefused and asks no
// further node.
func TestSetShardCountVia(t *testing.T) {
	down := &shardCountSvc{err: status.Error(codes.Unavailable, "no meta leader")}
	up := &shardCountSvc{resp: &raftqv1.SetShardCountResponse{Previous: 2, Count: 3, SlotMoves: []*raftqv1.SlotMoveInfo{
		{Id: 4, From: 0, To: 2, Slots: 85, Phase: "route"}, {From: 1, To: 2, Slots: 85, Phase: "planned"}}}}
	conns := []*grpc.ClientConn{serveCluster(t, down), serveCluster(t, up)}
	g, err := SetShardCountVia(t.Context(), conns, []string{"n1", "n2"}, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := []SlotMove{{ID: 4, From: 0, To: 2, Slots: 85, Phase: PhaseRoute}, {From: 1, To: 2, Slots: 85, Phase: PhasePlanned}}
	if g.Count != 3 || len(g.Moves) != 2 || g.Moves[0] != want[0] || g.Moves[1] != want[1] || down.calls != 1 || up.calls != 1 {
		t.Fatalf("growth %+v (calls %d, %d)", g, down.calls, up.calls)
	}
	if g.done(3) || !g.unsealed(3) {
		t.Fatalf("%+v: done %v, unsealed %v", g, g.done(3), g.unsealed(3))
	}

	for _, code := range []codes.Code{codes.FailedPrecondition, codes.Unimplemented} {
		refusing := &shardCountSvc{err: status.Error(code, "the shard count only grows")}
		up.calls = 0
		_, err = SetShardCountVia(t.Context(), []*grpc.ClientConn{serveCluster(t, refusing), conns[1]}, []string{"n1", "n2"}, 1)
		if !errors.Is(err, ErrRefused) || up.calls != 0 {
			t.Fatalf("%v: %v, %d calls to the next node", code, err, up.calls)
		}
	}
	if _, err := SetShardCountVia(t.Context(), conns[:1], []string{"n1"}, 0); err == nil || errors.Is(err, ErrRefused) {
		t.Fatalf("every node unavailable: %v, want a retriable error", err)
	}
	if _, err := SetShardCountVia(t.Context(), nil, nil, 0); err == nil {
		t.Fatal("no node at all answered")
	}
}
