package router

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
)

// LeaderHintTrailer is the gRPC trailer a node sets on an UNAVAILABLE
// whose outcome is unknown, to name the shard leader it knows of
// ("nodeID=grpcAddr"): the forwarded call may have reached that leader
// and been applied, so unlike LeaderTrailer it says nothing about the
// outcome. A client that may repeat the call (a dedup key, an idempotent
// call) repeats it there.
const LeaderHintTrailer = "raftq-leader-hint"

// PeerError means a forwarded shard call failed on the path to the node it
// was for, not at that node: the node could not be reached, or stopped
// answering while the call was out (see internal/liveness).
type PeerError struct {
	Shard          uint32
	Peer, PeerAddr string // the node the call was forwarded to
	// LeaderID and LeaderAddr are the best leader hint this node had when
	// the call failed (possibly Peer, or this node); empty when it knew
	// none.
	LeaderID, LeaderAddr string
	// Sent is true when the request may have reached Peer: its outcome is
	// unknown. False means it never left this node (no address, no
	// connection, Peer known to be silent): certainly not applied.
	Sent bool
	Err  error
}

func (e *PeerError) Error() string {
	if e.Sent {
		return fmt.Sprintf("shard %d: node %s (%s) stopped answering a forwarded call, which may have been applied: %v", e.Shard, e.Peer, e.PeerAddr, e.Err)
	}
	return fmt.Sprintf("shard %d: node %s (%s) unreachable, call not forwarded: %v", e.Shard, e.Peer, e.PeerAddr, e.Err)
}

func (e *PeerError) Unwrap() error { return e.Err }

// forward sends one shard call to node peerID at addr. It returns the
// call's result; or, when the node refused it (UNAVAILABLE with
// LeaderTrailer), its error, refused and the trailer's value; or a
// *PeerError when
// the path to the node failed. The call leaves only over a connection
// that is up to a node not known to be silent, and is cancelled if the
// node falls silent while it is out; a call that legitimately waits (a
// long poll, a slow raft round) goes on while the node answers probes.
func forward[T any](ctx context.Context, r *Router, id uint32, peerID, addr string,
	remote func(context.Context, raftqv1.NodeClient, ...grpc.CallOption) (T, error),
) (v T, refused bool, hint string, err error) {
	pc, err := r.conns.peer(addr)
	if err != nil {
		return v, false, "", &PeerError{Shard: id, Peer: peerID, PeerAddr: addr, Err: err}
	}
	if err := pc.live.Ready(ctx); err != nil {
		if ctx.Err() != nil {
			return v, false, "", ctx.Err()
		}
		return v, false, "", &PeerError{Shard: id, Peer: peerID, PeerAddr: addr, Err: err}
	}
	gctx, stop := pc.live.Guard(ctx)
	var trailer metadata.MD
	v, err = remote(gctx, raftqv1.NewNodeClient(pc.cc), grpc.Trailer(&trailer))
	silent := stop()
	if err == nil {
		pc.live.Heard()
		// Outside a gRPC handler (no stream in ctx) this is a no-op.
		_ = grpc.SetTrailer(ctx, metadata.Pairs(ShardLeaderTrailer, FormatShardLeader(id, peerID, addr)))
		return v, false, "", nil
	}
	if silent != nil && ctx.Err() == nil {
		return v, false, "", &PeerError{Shard: id, Peer: peerID, PeerAddr: addr, Sent: true, Err: silent}
	}
	if vals, ok := trailer[LeaderTrailer]; ok && status.Code(err) == codes.Unavailable {
		pc.live.Heard()
		if len(vals) > 0 {
			hint = vals[0]
		}
		return v, true, hint, err
	}
	return v, false, "", err
}
