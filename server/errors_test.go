package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/router"
	"github.com/raftq/raftq/shard"
	"github.com/raftq/raftq/wire"
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

// addrNode knows the gRPC address of one member, n3, as a node that has
// the member list does.
type addrNode struct{ startingNode }

func (*addrNode) MemberGRPC(id string) (string, bool) {
	if id == "n3" {
		return "h3:7101", true
	}
	return "", false
}

// Every error the layers below return maps to one gRPC code. A refusal
// (certainly not applied) carries the raftq-leader trailer naming the
// leader this node knows, with its address looked up when the error has
// none; an outcome-unknown error never does. Wrapping keeps the mapping.
func TestStatusMapping(t *testing.T) {
	none := []string(nil)
	for _, c := range []struct {
		name    string
		err     error
		code    codes.Code
		msg     string   // a part of the status message
		refusal []string // the raftq-leader trailer; nil: absent
	}{
		{"a status passes through", status.Error(codes.PermissionDenied, "no"), codes.PermissionDenied, "no", none},
		{"deadline", fmt.Errorf("apply: %w", context.DeadlineExceeded), codes.DeadlineExceeded, "apply: context deadline exceeded", none},
		{"cancelled", context.Canceled, codes.Canceled, "canceled", none},
		{"node starting", fmt.Errorf("send: %w", &router.NotReadyError{NodeID: "n2"}), codes.Unavailable, "node n2 is starting", []string{""}},
		{"node retired", fmt.Errorf("send: %w", &router.NotReadyError{NodeID: "n2", Retired: true}), codes.Unavailable, "node n2 was retired from the cluster", []string{""}},
		{"shard not leader, leader known", &raftgroup.NotLeaderError{Group: "shard-1", LeaderID: "n3"}, codes.Unavailable, "shard-1: not leader", []string{"n3=h3:7101"}},
		{"shard not leader, leader unknown", &raftgroup.NotLeaderError{Group: "shard-1"}, codes.Unavailable, "leader unknown", []string{""}},
		{"no shard leader reachable", &raftgroup.NotLeaderError{Group: "shard-1", LeaderID: "n3", Waited: true}, codes.Unavailable, "not reachable", []string{"n3=h3:7101"}},
		{"no shard leader at all", &raftgroup.NotLeaderError{Group: "shard-1", Waited: true}, codes.Unavailable, "no leader elected", []string{""}},
		{"meta not leader", fmt.Errorf("create queue: %w", &raftgroup.NotLeaderError{Group: "meta", LeaderID: "n3"}), codes.Unavailable, "meta: not leader", []string{"n3=h3:7101"}},
		{"meta leader of unknown address", &raftgroup.NotLeaderError{Group: "meta", LeaderID: "n9"}, codes.Unavailable, "meta: not leader", []string{"n9="}},
		{"shard shutting down", fmt.Errorf("apply: %w", shard.ErrShutdown), codes.Unavailable, "node shutting down", []string{""}},
		{"slot moving", fmt.Errorf("send: %w", &router.SlotMovingError{Queue: "q", Slot: 7, Keyed: true, Shard: 1}), codes.Unavailable, `slot 7 of queue "q" is moving between shards; retry`, []string{""}},
		{"prior owner look-up failed", fmt.Errorf("send: %w", &router.PriorLookupError{Shard: 0, Slot: 9, Err: &router.PeerError{Sent: true, Err: errors.New("cut off")}}), codes.Unavailable, "dedup look-up on shard 0", []string{""}},
		{"outcome unknown", fmt.Errorf("apply: %w", raftgroup.ErrUnknownResult), codes.Unavailable, "outcome unknown", none},
		{"disk full", &shard.DiskFullError{}, codes.ResourceExhausted, "", none},
		{"memory full", fmt.Errorf("send: %w", &shard.MemoryFullError{Node: "n1", Live: 600 << 20, Budget: 1 << 30}), codes.ResourceExhausted, "node n1: memory near its budget (600 MiB live of 1 GiB)", none},
		{"meta refused: exists", &meta.RefusedError{Kind: meta.ErrExists, Reason: "queue q exists"}, codes.AlreadyExists, "queue q exists", none},
		{"meta refused: not found", fmt.Errorf("update: %w", &meta.RefusedError{Kind: meta.ErrNotFound, Reason: "no queue q"}), codes.NotFound, "no queue q", none},
		{"meta refused: placed", &meta.RefusedError{Kind: meta.ErrAlreadyPlaced, Reason: "placed"}, codes.FailedPrecondition, "placed", none},
		{"meta refused: invalid", &meta.RefusedError{Kind: meta.ErrInvalid, Reason: "bad policy"}, codes.InvalidArgument, "bad policy", none},
		{"meta exists", fmt.Errorf("create: %w", meta.ErrExists), codes.AlreadyExists, "exists", none},
		{"meta not found", meta.ErrNotFound, codes.NotFound, "not found", none},
		{"fsm invalid", fmt.Errorf("%w: priority", fsm.ErrInvalidArgument), codes.InvalidArgument, "priority", none},
		{"meta invalid", meta.ErrInvalid, codes.InvalidArgument, "invalid", none},
		{"bad id", fmt.Errorf("get: %w", wire.ErrBadID), codes.InvalidArgument, "malformed message id", none},
		{"bad receipt", wire.ErrBadReceipt, codes.InvalidArgument, "malformed receipt", none},
		{"anything else", errors.New("boom"), codes.Internal, "internal error: boom", none},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := &trailerStream{}
			ctx := grpc.NewContextWithServerTransportStream(context.Background(), st)
			err := (&Server{node: &addrNode{}}).toStatus(ctx, c.err)
			got, _ := status.FromError(err)
			if got.Code() != c.code || !strings.Contains(got.Message(), c.msg) {
				t.Fatalf("status %v %q, want %v containing %q", got.Code(), got.Message(), c.code, c.msg)
			}
			if tr := st.trailer.Get(router.LeaderTrailer); !slices.Equal(tr, c.refusal) {
				t.Errorf("%s = %q, want %q", router.LeaderTrailer, tr, c.refusal)
			}
		})
	}
	if (&Server{}).toStatus(context.Background(), nil) != nil {
		t.Error("nil error did not map to nil")
	}
}

// A shard's result code maps to the status clients see, for the whole
// command (router.ResultError, resultStatus) and for one item of a batch
// (itemStatus); every code the FSM defines has a mapping.
func TestResultCodeMapping(t *testing.T) {
	want := map[fsmpb.Code]codes.Code{
		fsmpb.Code_CODE_OK:                  codes.OK,
		fsmpb.Code_CODE_INVALID_ARGUMENT:    codes.InvalidArgument,
		fsmpb.Code_CODE_QUEUE_NOT_FOUND:     codes.NotFound,
		fsmpb.Code_CODE_MESSAGE_NOT_FOUND:   codes.NotFound,
		fsmpb.Code_CODE_STALE_RECEIPT:       codes.FailedPrecondition,
		fsmpb.Code_CODE_FAILED_PRECONDITION: codes.FailedPrecondition,
		fsmpb.Code_CODE_RESOURCE_EXHAUSTED:  codes.ResourceExhausted,
		fsmpb.Code_CODE_UNAVAILABLE:         codes.Unavailable,
		fsmpb.Code_CODE_SLOT_MOVED:          codes.Unavailable,
	}
	values := fsmpb.Code(0).Descriptor().Values()
	for i := 0; i < values.Len(); i++ {
		fc := fsmpb.Code(values.Get(i).Number())
		t.Run(fc.String(), func(t *testing.T) {
			w, ok := want[fc]
			if !ok {
				t.Fatalf("%v has no expected gRPC code in this test: add one", fc)
			}
			fst := &fsmpb.Status{Code: fc, Message: "why"}
			err := (&Server{}).toStatus(context.Background(), fmt.Errorf("apply: %w", &router.ResultError{Status: fst}))
			if status.Code(err) != w {
				t.Errorf("ResultError: %v, want %v", err, w)
			}
			if w != codes.OK && status.Convert(err).Message() != "why" {
				t.Errorf("ResultError message %q, want the FSM's %q", status.Convert(err).Message(), "why")
			}
			if code, msg := itemStatus(fst); codes.Code(code) != w || msg != "why" {
				t.Errorf("itemStatus = %v %q, want %v %q", codes.Code(code), msg, w, "why")
			}
		})
	}
	if code, _ := itemStatus(&fsmpb.Status{Code: 99}); codes.Code(code) != codes.Internal {
		t.Errorf("an unknown FSM code maps to %v, want INTERNAL", codes.Code(code))
	}
}

// An overloaded node's refusal says when to come back: RetryInfo, which
// the Go client honours (client.retryAfter).
func TestOverloadRefusalsCarryRetryInfo(t *testing.T) {
	for _, err := range []error{&shard.DiskFullError{}, &shard.MemoryFullError{}} {
		st, _ := status.FromError((&Server{node: &addrNode{}}).toStatus(context.Background(), err))
		var delay time.Duration
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				delay = ri.GetRetryDelay().AsDuration()
			}
		}
		if st.Code() != codes.ResourceExhausted || delay != overloadRetry {
			t.Errorf("%T: %v with retry delay %v, want RESOURCE_EXHAUSTED after %v", err, st.Code(), delay, overloadRetry)
		}
	}
	st, _ := status.FromError((&Server{node: &addrNode{}}).toStatus(context.Background(),
		fmt.Errorf("send: %w", &shard.OverloadError{Shard: 2, Reason: "full", RetryAfter: 200 * time.Millisecond})))
	if st.Code() != codes.ResourceExhausted || len(st.Details()) != 1 || st.Details()[0].(*errdetails.RetryInfo).GetRetryDelay().AsDuration() != 200*time.Millisecond {
		t.Errorf("a full send queue: %v %v, want RESOURCE_EXHAUSTED after 200ms", st.Code(), st.Details())
	}
}
