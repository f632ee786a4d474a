package server

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/router"
)

// addrBook is a Node that knows only members' gRPC addresses.
type addrBook struct {
	Node
	grpc map[string]string
}

func (a addrBook) MemberGRPC(id string) (string, bool) { addr, ok := a.grpc[id]; return addr, ok }

// Every not-leader refusal, from a shard replica, the meta group or a
// router that found no leader in time, is UNAVAILABLE with the refusal
// trailer naming the leader at its gRPC address (the client retries it
// there at once); an unknown outcome never carries that trailer.
func TestNotLeaderStatus(t *testing.T) {
	s := &Server{node: addrBook{grpc: map[string]string{"n2": "h2:9090"}}}
	for _, c := range []struct {
		name        string
		err         error
		wantRefusal []string
	}{
		{"shard replica", &raftgroup.NotLeaderError{Group: "shard-1", LeaderID: "n2", LeaderAddr: "h2:7000"}, []string{"n2=h2:9090"}},
		{"meta group", &raftgroup.NotLeaderError{Group: "meta", LeaderID: "n2"}, []string{"n2=h2:9090"}},
		{"router waited", &raftgroup.NotLeaderError{Group: "shard-3", LeaderID: "n2", Waited: true}, []string{"n2=h2:9090"}},
		{"wrapped", fmt.Errorf("stats of shard 1: %w", &raftgroup.NotLeaderError{Group: "shard-1", LeaderID: "n2"}), []string{"n2=h2:9090"}},
		{"leader unknown", &raftgroup.NotLeaderError{Group: "shard-0", Waited: true}, []string{""}},
		{"leader without an address", &raftgroup.NotLeaderError{Group: "meta", LeaderID: "n9"}, []string{"n9="}},
		{"outcome unknown", fmt.Errorf("%w: leadership lost", raftgroup.ErrUnknownResult), nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := &trailerStream{}
			ctx := grpc.NewContextWithServerTransportStream(context.Background(), st)
			err := s.toStatus(ctx, c.err)
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("status = %v, want UNAVAILABLE", err)
			}
			if got := st.trailer.Get(router.LeaderTrailer); !slices.Equal(got, c.wantRefusal) {
				t.Errorf("%s = %q, want %q", router.LeaderTrailer, got, c.wantRefusal)
			}
		})
	}
}
