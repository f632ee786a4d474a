package router

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/shard"
)

// LeaderTrailer is the gRPC trailer a node sets when it refuses a shard
// call because it does not lead the shard: "nodeID=grpcAddr" of the leader
// it knows, or empty. Its presence means the call certainly had no effect,
// so it is safe to retry elsewhere.
const LeaderTrailer = "raftq-leader"

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

// ErrNoLeader means no leader could be found for a shard within the wait.
var ErrNoLeader = errors.New("no leader for shard")

// NoLeaderError names the shard and the last hint.
type NoLeaderError struct {
	Shard      uint32
	LeaderID   string
	LeaderAddr string
}

func (e *NoLeaderError) Error() string {
	if e.LeaderID != "" {
		return fmt.Sprintf("shard %d: leader %s (%s) not reachable in time", e.Shard, e.LeaderID, e.LeaderAddr)
	}
	return fmt.Sprintf("shard %d: no leader elected", e.Shard)
}

func (e *NoLeaderError) Unwrap() error { return ErrNoLeader }

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
	remote func(context.Context, raftqv1.NodeClient, ...grpc.CallOption) (T, error),
) (T, error) {
	return callWait(ctx, r, id, r.opts.LeaderWait, local, remote)
}

// callWait is call with its own bound on waiting for a leader; 0 means one
// round of attempts without sleeping.
func callWait[T any](ctx context.Context, r *Router, id uint32, leaderWait time.Duration,
	local func(context.Context, *shard.Shard) (T, error),
	remote func(context.Context, raftqv1.NodeClient, ...grpc.CallOption) (T, error),
) (T, error) {
	var zero T
	wctx, cancel := context.WithTimeout(ctx, max(leaderWait, time.Millisecond))
	defer cancel()
	backoff := 20 * time.Millisecond
	lastID, lastAddr := "", ""
	replicaTry := 0
	for {
		leaderID, addr, known := r.topo.ShardLeader(id)
		switch {
		case known && leaderID == r.topo.NodeID():
			sh := r.topo.LocalShard(id)
			if sh == nil {
				break
			}
			v, err := local(ctx, sh)
			var nl *shard.NotLeaderError
			if errors.As(err, &nl) {
				lastID, lastAddr = nl.LeaderID, nl.LeaderAddr
				if nl.LeaderID != "" && nl.LeaderID != r.topo.NodeID() {
					r.topo.NoteLeader(id, nl.LeaderID)
					continue
				}
				break
			}
			return v, err
		default:
			if !known || addr == "" {
				// Nobody known: ask a replica, which answers with its
				// leader hint (or serves, if it leads).
				reps := r.topo.ShardReplicas(id)
				if len(reps) == 0 {
					break
				}
				leaderID = reps[replicaTry%len(reps)]
				replicaTry++
				if leaderID == r.topo.NodeID() {
					break
				}
				a, ok := r.topo.MemberGRPC(leaderID)
				if !ok {
					break
				}
				addr = a
			}
			nc, err := r.conns.node(addr)
			if err != nil {
				return zero, err
			}
			var trailer metadata.MD
			v, err := remote(ctx, nc, grpc.Trailer(&trailer))
			if err == nil {
				// Outside a gRPC handler (no stream in ctx) this is a no-op.
				_ = grpc.SetTrailer(ctx, metadata.Pairs(ShardLeaderTrailer, FormatShardLeader(id, leaderID, addr)))
				return v, nil
			}
			hint, refused := trailer[LeaderTrailer]
			if !refused || status.Code(err) != codes.Unavailable {
				return zero, err
			}
			if len(hint) > 0 {
				hid, haddr := ParseLeaderHint(hint[0])
				lastID, lastAddr = hid, haddr
				if hid != "" && hid != leaderID {
					r.topo.NoteLeader(id, hid)
					continue
				}
			}
		}
		if err := sleepCtx(wctx, backoff); err != nil {
			if ctx.Err() != nil {
				return zero, ctx.Err()
			}
			return zero, &NoLeaderError{Shard: id, LeaderID: lastID, LeaderAddr: lastAddr}
		}
		backoff = min(backoff*2, 400*time.Millisecond)
	}
}
