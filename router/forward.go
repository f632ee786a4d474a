package router

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/raftq/raftq/peer"
	"github.com/raftq/raftq/peer/peerpb"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/shard"
)

// LeaderTrailer is the gRPC trailer a node sets when it refuses a shard
// call because it does not lead the shard: "nodeID=grpcAddr" of the leader
// it knows, or empty. Its presence means the call certainly had no effect,
// so it is safe to retry elsewhere. Nodes refusing forwarded calls set the
// same trailer.
const LeaderTrailer = peer.LeaderTrailer

// LeaderHintTrailer is the gRPC trailer a node sets on an UNAVAILABLE
// whose outcome is unknown, to name the shard leader it knows of
// ("nodeID=grpcAddr"): the forwarded call may have reached that leader
// and been applied, so unlike LeaderTrailer it says nothing about the
// outcome. A client that may repeat the call (a dedup key, an idempotent
// call) repeats it there.
const LeaderHintTrailer = "raftq-leader-hint"

// PeerError means a forwarded shard call failed on the path to the node it
// was for, not at that node (peer.Error).
type PeerError = peer.Error

// ShardLeaderTrailer is the gRPC trailer a node adds to a call it served by
// forwarding to a shard's leader: "shard:nodeID=grpcAddr", one value per
// shard forwarded to. The forward succeeded, so that node led the shard.
// A client that caches leaders learns from it that its cache is stale:
// nodes forward rather than refuse, so without it a client dialled before
// a leadership change kept sending every call through the old leader, an
// extra hop on two nodes for as long as it lived.
const ShardLeaderTrailer = "raftq-shard-leader"

// FormatShardLeader renders one ShardLeaderTrailer value.
func FormatShardLeader(id uint32, nodeID, addr string) string {
	return fmt.Sprintf("%d:%s", id, FormatLeaderHint(nodeID, addr))
}

// FormatLeaderHint renders the trailer value.
func FormatLeaderHint(nodeID, addr string) string {
	if nodeID == "" {
		return ""
	}
	return nodeID + "=" + addr
}

// ParseLeaderHint is the inverse of FormatLeaderHint.
func ParseLeaderHint(v string) (nodeID, addr string) {
	nodeID, addr, _ = strings.Cut(v, "=")
	return nodeID, addr
}

// call runs one shard operation at the shard's leader: local when this
// node leads it, else forwarded. It retries only what certainly had no
// effect (a not-leader refusal, or no known leader to call), waiting up to
// LeaderWait for an election; any other error is returned as is, since the
// operation may have been applied.
func call[T any](ctx context.Context, r *Router, id uint32,
	local func(context.Context, *shard.Shard) (T, error),
	remote func(context.Context, peerpb.PeerClient, ...grpc.CallOption) (T, error),
) (T, error) {
	return callWait(ctx, r, id, r.opts.LeaderWait, local, remote)
}

// callWait is call with its own bound on waiting for a leader; 0 means one
// round of attempts without sleeping.
//
// A leader this node cannot reach is not waited for: the call fails at
// once with a *PeerError (not sent), naming the leader, so the caller can
// go there itself; and a forward that was out when the leader fell silent
// fails within the liveness probe's bound, not the caller's deadline, with
// a *PeerError whose outcome is unknown (Sent).
func callWait[T any](ctx context.Context, r *Router, id uint32, leaderWait time.Duration,
	local func(context.Context, *shard.Shard) (T, error),
	remote func(context.Context, peerpb.PeerClient, ...grpc.CallOption) (T, error),
) (T, error) {
	var zero T
	wctx, cancel := context.WithTimeout(ctx, max(leaderWait, time.Millisecond))
	defer cancel()
	backoff := 20 * time.Millisecond
	lastID, lastAddr := "", ""
	replicaTry := 0
	self := r.topo.NodeID()
	for {
		leaderID, _, known := r.topo.ShardLeader(id)
		paddr, _ := r.topo.MemberPeer(leaderID)
		switch {
		case known && leaderID == self:
			sh := r.topo.LocalShard(id)
			if sh == nil {
				break
			}
			v, err := local(ctx, sh)
			var nl *raftgroup.NotLeaderError
			if errors.As(err, &nl) {
				lastID, lastAddr = nl.LeaderID, nl.LeaderAddr
				if nl.LeaderID != "" && nl.LeaderID != self {
					r.topo.NoteLeader(id, nl.LeaderID)
					continue
				}
				break
			}
			return v, err
		case known && paddr != "":
			v, refused, hint, err := forward(ctx, r, id, leaderID, paddr, remote)
			if err == nil {
				return v, nil
			}
			if !refused {
				return zero, r.hinted(id, err, lastID, lastAddr)
			}
			if hint != "" {
				hid, haddr := ParseLeaderHint(hint)
				lastID, lastAddr = hid, haddr
				if hid != "" && hid != leaderID {
					r.topo.NoteLeader(id, hid)
					continue
				}
			}
		default:
			// Nobody known: ask the other replicas, each of which answers
			// with its leader hint (or serves, if it leads), skipping those
			// this node cannot reach.
			reps := r.topo.ShardReplicas(id)
			asked, unreachable := 0, 0
			var lastUnreachable error
		replicas:
			for range reps {
				rid := reps[replicaTry%len(reps)]
				replicaTry++
				if rid == self {
					continue // its election is what the sleep below waits for
				}
				asked++
				raddr, ok := r.topo.MemberPeer(rid)
				if !ok {
					unreachable++
					lastUnreachable = &PeerError{Shard: id, Peer: rid, Err: errors.New("no peer address known")}
					continue
				}
				v, refused, hint, err := forward(ctx, r, id, rid, raddr, remote)
				var pe *PeerError
				switch {
				case err == nil:
					// It served a leader-only call, so it leads: remember
					// it, or this node keeps asking replicas in turn and
					// names no leader for a shard it does not host
					// (`raftq cluster nodes` asked here).
					r.topo.NoteLeader(id, rid)
					return v, nil
				case errors.As(err, &pe) && !pe.Sent:
					unreachable++
					lastUnreachable = err
					continue
				case !refused:
					return zero, r.hinted(id, err, lastID, lastAddr)
				}
				if hint != "" {
					hid, haddr := ParseLeaderHint(hint)
					lastID, lastAddr = hid, haddr
					if hid != "" && hid != rid {
						r.topo.NoteLeader(id, hid)
					}
				}
				break replicas
			}
			if asked > 0 && unreachable == asked {
				// No replica can be asked: waiting for an election here
				// would hold the caller for nothing it can see.
				return zero, r.hinted(id, lastUnreachable, lastID, lastAddr)
			}
			if lid, _, ok := r.topo.ShardLeader(id); ok {
				if laddr, _ := r.topo.MemberPeer(lid); laddr != "" {
					// A replica's hint named a leader this node can call:
					// go there now. (Without an address this branch would
					// run again at once: sleep instead.)
					continue
				}
			}
		}
		if err := sleepCtx(wctx, backoff); err != nil {
			if ctx.Err() != nil {
				return zero, ctx.Err()
			}
			return zero, &raftgroup.NotLeaderError{Group: shard.GroupName(id), LeaderID: lastID, LeaderAddr: lastAddr, Waited: true}
		}
		backoff = min(backoff*2, 400*time.Millisecond)
	}
}

// hinted gives a *PeerError the best leader hint this node has now: its
// current view of the shard's leader (which may have changed while the
// call was out), else the last hint a refusal gave. Other errors are
// returned as they are.
func (r *Router) hinted(id uint32, err error, lastID, lastAddr string) error {
	var pe *PeerError
	if !errors.As(err, &pe) {
		return err
	}
	if lid, laddr, ok := r.topo.ShardLeader(id); ok && laddr != "" {
		pe.LeaderID, pe.LeaderAddr = lid, laddr
	} else if lastID != "" {
		pe.LeaderID, pe.LeaderAddr = lastID, lastAddr
	}
	return pe
}

// forward sends one shard call to node peerID at its peer address addr
// (peer.Forward). A call it served names that node as the shard's leader
// to this node's caller (ShardLeaderTrailer); outside a gRPC handler
// that is a no-op.
func forward[T any](ctx context.Context, r *Router, id uint32, peerID, addr string,
	remote func(context.Context, peerpb.PeerClient, ...grpc.CallOption) (T, error),
) (v T, refused bool, hint string, err error) {
	v, refused, hint, err = peer.Forward(ctx, r.peers, id, peerID, addr, remote)
	if err == nil {
		if gaddr, ok := r.topo.MemberGRPC(peerID); ok {
			_ = grpc.SetTrailer(ctx, metadata.Pairs(ShardLeaderTrailer, FormatShardLeader(id, peerID, gaddr)))
		}
	}
	return v, refused, hint, err
}
