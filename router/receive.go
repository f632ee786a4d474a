package router

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/shard"
)

// Leased is a message leased by a receive, with the shard that granted it.
// The message carries its lease epoch and the term that granted it.
type Leased struct {
	Shard   uint32
	Message *fsmpb.Message
}

// Receive gathers up to rq.Max messages of rq.Queue from the queue's shards,
// long-polling up to wait when none is ready.
//
// A lease is a raft write, so the gather never leases more than it can
// return: it sweeps shards one at a time asking each for what is still
// missing, and it waits with wait-only calls that lease nothing (a cancelled
// leasing long-poll could commit leases nobody receives, which burns a
// receive count and delays the message by a visibility timeout).
func (r *Router) Receive(ctx context.Context, rq *fsmpb.Receive, wait time.Duration) ([]Leased, error) {
	deadline := time.Now().Add(wait)
	for {
		got, err := r.sweep(ctx, rq)
		if len(got) > 0 {
			return got, nil
		}
		remaining := time.Until(deadline)
		if remaining <= 0 {
			// Empty and out of time: an error only if every shard failed.
			return nil, err
		}
		if werr := r.waitAny(ctx, rq.GetQueue(), remaining); werr != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, nil
		}
	}
}

// sweep asks shards in rotation for the messages still wanted. The error
// is non-nil only when no shard answered.
func (r *Router) sweep(ctx context.Context, rq *fsmpb.Receive) ([]Leased, error) {
	var out []Leased
	var firstErr error
	answered := 0
	var bytes uint64
	for _, id := range r.rotation() {
		want := int(rq.GetMax()) - len(out)
		if want <= 0 {
			break
		}
		budget := uint64(0)
		if limit := rq.GetMaxBytes(); limit > 0 {
			if bytes >= limit {
				break
			}
			budget = limit - bytes
		}
		sub := &fsmpb.Receive{Queue: rq.GetQueue(), Max: uint32(want), VisibilityTimeoutMs: rq.GetVisibilityTimeoutMs(), Consumer: rq.GetConsumer(), MaxBytes: budget}
		// Once leases are held, do not wait for an election elsewhere: the
		// leases would age (or the caller give up) while we wait.
		leaderWait := r.opts.LeaderWait
		if len(out) > 0 {
			leaderWait = 0
		}
		res, err := r.receiveShardWait(ctx, id, sub, 0, leaderWait)
		if err != nil {
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		answered++
		if st := res.GetStatus(); st.GetCode() != fsmpb.Code_CODE_OK {
			return out, &ResultError{Status: st}
		}
		for _, m := range res.GetReceive().GetMessages() {
			out = append(out, Leased{Shard: id, Message: m})
			bytes += uint64(len(m.GetBody()))
		}
	}
	if answered > 0 {
		return out, nil
	}
	return out, firstErr
}

// receiveShard leases from one shard without waiting. A local leader
// skips the raft write when its FSM shows nothing ready.
func (r *Router) receiveShard(ctx context.Context, id uint32, rq *fsmpb.Receive, wait time.Duration) (*fsmpb.Result, error) {
	return r.receiveShardWait(ctx, id, rq, wait, r.opts.LeaderWait)
}

func (r *Router) receiveShardWait(ctx context.Context, id uint32, rq *fsmpb.Receive, wait, leaderWait time.Duration) (*fsmpb.Result, error) {
	return callWait(ctx, r, id, leaderWait,
		func(ctx context.Context, sh *shard.Shard) (*fsmpb.Result, error) {
			return ReceiveLocal(ctx, sh, rq, wait)
		},
		func(ctx context.Context, c raftqv1.NodeClient, opts ...grpc.CallOption) (*fsmpb.Result, error) {
			resp, err := c.ShardReceive(ctx, &raftqv1.ShardReceiveRequest{ShardId: id, Receive: rq, WaitMs: wait.Milliseconds()}, opts...)
			if err != nil {
				return nil, err
			}
			return resp.GetResult(), nil
		})
}

// ReceiveLocal serves a receive on a shard this node leads: Max 0 means
// wait-only (block until the queue has ready messages or wait ends, lease
// nothing). The server's ShardReceive handler uses it too.
func ReceiveLocal(ctx context.Context, sh *shard.Shard, rq *fsmpb.Receive, wait time.Duration) (*fsmpb.Result, error) {
	if !sh.IsLeader() {
		id, addr := sh.Leader()
		return nil, &shard.NotLeaderError{LeaderID: string(id), LeaderAddr: string(addr)}
	}
	if rq.GetMax() == 0 {
		wctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		err := sh.WaitReady(wctx, rq.GetQueue())
		if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			err = nil // waited the full time: an empty answer, not a failure
		}
		return &fsmpb.Result{Body: &fsmpb.Result_Receive{Receive: &fsmpb.ReceiveResult{}}}, err
	}
	if st, ok := sh.FSM().Stats(rq.GetQueue()); ok && st.Leasable == 0 && wait == 0 {
		return &fsmpb.Result{Body: &fsmpb.Result_Receive{Receive: &fsmpb.ReceiveResult{}}}, nil
	}
	return sh.Receive(ctx, rq, wait)
}

// waitAny blocks until some shard reports ready messages for queue, the
// time is up (nil) or ctx ends. Wait-only calls lease nothing, so
// cancelling the losers is harmless.
func (r *Router) waitAny(ctx context.Context, queue string, d time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	n := r.topo.ShardCount()
	ready := make(chan error, n)
	start := time.Now()
	for id := uint32(0); id < n; id++ {
		go func() {
			_, err := r.receiveShard(wctx, id, &fsmpb.Receive{Queue: queue}, d)
			ready <- err
		}()
	}
	failures := 0
	for range n {
		err := <-ready
		if err == nil && wctx.Err() == nil {
			return nil // one shard has something (or its wait ended early)
		}
		if err != nil {
			failures++
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	// Every shard failed fast (no leaders during an election): pause
	// instead of spinning the sweep.
	if failures == int(n) && time.Since(start) < 100*time.Millisecond {
		return sleepCtx(wctx, 100*time.Millisecond)
	}
	return nil
}

// ResultError carries an FSM whole-command refusal (e.g. queue not found).
type ResultError struct{ Status *fsmpb.Status }

func (e *ResultError) Error() string { return e.Status.GetMessage() }
