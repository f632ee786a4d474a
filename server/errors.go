package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/router"
	"github.com/raftq/raftq/shard"
	"github.com/raftq/raftq/wire"
)

// toStatus turns any error from the layers below into a gRPC status.
// Unavailable with the raftq-leader trailer means "certainly not applied,
// retry (at the hinted leader)"; Unavailable without it means the outcome
// is unknown (the entry may still commit), and may carry the
// raftq-leader-hint trailer naming the leader to retry at.
func (s *Server) toStatus(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var nl *raftgroup.NotLeaderError
	var re *router.ResultError
	var nr *router.NotReadyError
	var pe *router.PeerError
	var mre *meta.RefusedError
	var ovl *shard.OverloadError
	var rle *shard.RateError
	var pfe *router.ParkedFullError
	var sme *router.SlotMovingError
	var ple *router.PriorLookupError
	switch {
	case errors.As(err, &ple):
		// Checked first: it may wrap a forwarding error, but whatever the
		// look-up's fate, the send itself was never proposed.
		s.refuse(ctx, "")
		return status.Error(codes.Unavailable, ple.Error())
	case errors.As(err, &pe) && !pe.Sent:
		// The forward never left this node: a refusal, and the leader
		// it could not reach may still be reachable from the caller.
		s.refuseAt(ctx, pe.LeaderID, pe.LeaderAddr)
		return status.Error(codes.Unavailable, err.Error())
	case errors.As(err, &pe):
		s.hint(ctx, pe.LeaderID, pe.LeaderAddr)
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.As(err, &nr):
		s.refuse(ctx, "")
		return status.Error(codes.Unavailable, nr.Error())
	case errors.As(err, &nl):
		// Nothing proposed, whichever group refused (a shard, the meta
		// group, or a router that found no leader in time).
		s.refuse(ctx, nl.LeaderID)
		return status.Error(codes.Unavailable, err.Error())
	case errors.As(err, &re):
		return resultStatus(re.Status)
	case errors.As(err, &sme):
		// The shard wrote nothing and the slot's new owner is not known
		// yet: refused, like a wait for an election that ran out.
		s.refuse(ctx, "")
		return status.Error(codes.Unavailable, sme.Error())
	case errors.Is(err, fsm.ErrFormatLag):
		// Refused before proposing: a replica's binary is older than the
		// command kind; nothing applied. Retry after the upgrade.
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.As(err, &pfe):
		// Refused before parking: the sweep leased nothing.
		return exhausted(pfe.Error(), overloadRetry)
	case errors.As(err, &rle):
		// Refused before proposing: past a send_rate quota.
		return exhausted(rle.Error(), rle.RetryAfter)
	case errors.As(err, &mre) && errors.Is(mre.Kind, meta.ErrQuota):
		return exhausted(mre.Reason, quotaRetry)
	case errors.As(err, &ovl):
		// Refused before proposing: the leader's queue of sends is full.
		return exhausted(ovl.Error(), ovl.RetryAfter)
	case errors.Is(err, shard.ErrDiskFull), errors.Is(err, shard.ErrMemoryFull):
		// Refused before proposing: nothing applied; retry once space is
		// freed or the backlog drained.
		return exhausted(err.Error(), overloadRetry)
	case errors.Is(err, raftgroup.ErrUnknownResult):
		return status.Errorf(codes.Unavailable, "outcome unknown, the request may have been applied: %v", err)
	case errors.Is(err, shard.ErrShutdown):
		s.refuse(ctx, "")
		return status.Errorf(codes.Unavailable, "node shutting down: %v", err)
	case errors.As(err, &mre):
		// The meta group's own words; the chain around them only repeats
		// the request ("create queue "x": meta: ...").
		return status.Error(metaCode(mre.Kind), mre.Reason)
	case errors.Is(err, meta.ErrExists):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, meta.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, fsm.ErrInvalidArgument), errors.Is(err, meta.ErrInvalid), errors.Is(err, wire.ErrBadID), errors.Is(err, wire.ErrBadReceipt):
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return status.Errorf(codes.Internal, "internal error: %v", err)
}

// refuse marks the call as certainly not applied and names the leader
// this node knows of.
func (s *Server) refuse(ctx context.Context, leaderID string) {
	s.refuseAt(ctx, leaderID, "")
}

// refuseAt is refuse with the leader's address when the caller has it.
func (s *Server) refuseAt(ctx context.Context, leaderID, addr string) {
	if leaderID != "" && addr == "" {
		addr, _ = s.node.MemberGRPC(leaderID)
	}
	_ = grpc.SetTrailer(ctx, metadata.Pairs(router.LeaderTrailer, router.FormatLeaderHint(leaderID, addr)))
}

// hint names the leader this node knows of on an error whose outcome is
// unknown, without claiming anything about the outcome
// (router.LeaderHintTrailer). Nothing is set when it knows none.
func (s *Server) hint(ctx context.Context, leaderID, addr string) {
	if leaderID == "" {
		return
	}
	if addr == "" {
		addr, _ = s.node.MemberGRPC(leaderID)
	}
	if addr == "" {
		return
	}
	_ = grpc.SetTrailer(ctx, metadata.Pairs(router.LeaderHintTrailer, router.FormatLeaderHint(leaderID, addr)))
}

func metaCode(kind error) codes.Code {
	switch {
	case errors.Is(kind, meta.ErrExists):
		return codes.AlreadyExists
	case errors.Is(kind, meta.ErrNotFound):
		return codes.NotFound
	case errors.Is(kind, meta.ErrAlreadyPlaced), errors.Is(kind, meta.ErrRefused):
		return codes.FailedPrecondition
	}
	return codes.InvalidArgument
}

func grpcCode(c fsmpb.Code) codes.Code {
	switch c {
	case fsmpb.Code_CODE_OK:
		return codes.OK
	case fsmpb.Code_CODE_INVALID_ARGUMENT:
		return codes.InvalidArgument
	case fsmpb.Code_CODE_QUEUE_NOT_FOUND, fsmpb.Code_CODE_MESSAGE_NOT_FOUND:
		return codes.NotFound
	case fsmpb.Code_CODE_STALE_RECEIPT, fsmpb.Code_CODE_FAILED_PRECONDITION:
		return codes.FailedPrecondition
	case fsmpb.Code_CODE_RESOURCE_EXHAUSTED:
		return codes.ResourceExhausted
	case fsmpb.Code_CODE_UNAVAILABLE, fsmpb.Code_CODE_SLOT_MOVED:
		// SLOT_MOVED reaches a caller only if a router did not resend it
		// (router.Send does): the slot is moving, nothing was written.
		return codes.Unavailable
	}
	return codes.Internal
}

func resultStatus(st *fsmpb.Status) error {
	if st.GetCode() == fsmpb.Code_CODE_OK {
		return nil
	}
	if st.GetCode() == fsmpb.Code_CODE_RESOURCE_EXHAUSTED {
		// Past a capacity limit or quota: room comes back as consumers
		// settle messages.
		return exhausted(st.GetMessage(), quotaRetry)
	}
	return status.Error(grpcCode(st.GetCode()), st.GetMessage())
}

// itemStatus renders a per-item FSM status for batch responses.
func itemStatus(st *fsmpb.Status) (int32, string) {
	return int32(grpcCode(st.GetCode())), st.GetMessage()
}

func invalid(format string, args ...any) error {
	return status.Error(codes.InvalidArgument, fmt.Sprintf(format, args...))
}

// overloadRetry is the wait a node short of memory or disk asks of a
// refused sender: its guards sample every 100 ms to 1 s, and a backlog
// drains over seconds.
const overloadRetry = time.Second

// quotaRetry is the wait asked of a caller past a quota on depth, bytes,
// leases or queues: what frees them is consumers' work, which takes
// seconds, not milliseconds.
const quotaRetry = time.Second

// retryMs is the wait err's google.rpc.RetryInfo asks for, in whole
// milliseconds (at least 1), or 0 without one.
func retryMs(err error) int64 {
	st, ok := status.FromError(err)
	if !ok || err == nil {
		return 0
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return max(ri.GetRetryDelay().AsDuration().Milliseconds(), 1)
		}
	}
	return 0
}

// exhausted is a RESOURCE_EXHAUSTED refusal carrying a google.rpc.RetryInfo
// detail: nothing was applied, and the client may try again after retry.
func exhausted(msg string, retry time.Duration) error {
	st, err := status.New(codes.ResourceExhausted, msg).WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)})
	if err != nil {
		return status.Error(codes.ResourceExhausted, msg)
	}
	return st.Err()
}
