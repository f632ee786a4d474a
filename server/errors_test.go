package server

import (
	"context"
	"errors"
	"slices"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/raftq/raftq/router"
)

// trailerStream stands in for a gRPC server stream, keeping the trailer a
// handler sets.
type trailerStream struct{ trailer metadata.MD }

func (s *trailerStream) Method() string               { return "/test" }
func (s *trailerStream) SetHeader(metadata.MD) error  { return nil }
func (s *trailerStream) SendHeader(metadata.MD) error { return nil }
func (s *trailerStream) SetTrailer(md metadata.MD) error {
	s.trailer = metadata.Join(s.trailer, md)
	return nil
}

// A forward that never left is a refusal naming the leader (the client
// retries it at once, anywhere); one cut off while out is outcome unknown
// and names the leader only as a hint, never with the refusal trailer.
func TestPeerErrorStatus(t *testing.T) {
	cause := errors.New("no answer")
	for _, c := range []struct {
		name        string
		err         error
		wantRefusal []string
		wantHint    []string
	}{
		{"not sent", &router.PeerError{Shard: 0, Peer: "n2", PeerAddr: "h2:1", LeaderID: "n2", LeaderAddr: "h2:1", Err: cause}, []string{"n2=h2:1"}, nil},
		{"not sent, no leader known", &router.PeerError{Peer: "n2", PeerAddr: "h2:1", Err: cause}, []string{""}, nil},
		{"sent", &router.PeerError{Peer: "n2", PeerAddr: "h2:1", LeaderID: "n3", LeaderAddr: "h3:1", Sent: true, Err: cause}, nil, []string{"n3=h3:1"}},
		{"sent, no leader known", &router.PeerError{Peer: "n2", PeerAddr: "h2:1", Sent: true, Err: cause}, nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := &trailerStream{}
			ctx := grpc.NewContextWithServerTransportStream(context.Background(), st)
			err := (&Server{}).toStatus(ctx, c.err)
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("status = %v, want UNAVAILABLE", err)
			}
			if got := st.trailer.Get(router.LeaderTrailer); !slices.Equal(got, c.wantRefusal) {
				t.Errorf("%s = %q, want %q", router.LeaderTrailer, got, c.wantRefusal)
			}
			if got := st.trailer.Get(router.LeaderHintTrailer); !slices.Equal(got, c.wantHint) {
				t.Errorf("%s = %q, want %q", router.LeaderHintTrailer, got, c.wantHint)
			}
		})
	}
}
