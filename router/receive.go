package router

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/peer"
	"github.com/raftq/raftq/peer/peerpb"
	"github.com/raftq/raftq/raftgroup"
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
// return: it asks the shards in parallel for shares of what is still
// missing that add up to no more than that (see sweep), and it waits with
// ShardWait calls that lease nothing (a cancelled leasing long poll could
// commit leases nobody receives, which burns a receive count and delays
// the message by a visibility timeout). The shards only claim and wait:
// this loop is the one long poll.
//
// waited is how long the receive went before the sweep that found
// messages began: the long-poll part, which says how idle the consumer
// was, not how slow the claim. The sweep itself, one raft round when a
// shard holds enough, is the claim. Messages the first sweep finds were
// ready when the call came: waited is 0. With nothing returned, waited is
// the whole call.
//
// Without a shard map it fails at once with a *NotReadyError.
func (r *Router) Receive(ctx context.Context, rq *fsmpb.Receive, wait time.Duration) (leased []Leased, waited time.Duration, err error) {
	if err := r.Ready(); err != nil {
		return nil, 0, err
	}
	start := time.Now()
	deadline := start.Add(wait)
	for first := true; ; first = false {
		sweepStart := time.Now()
		got, err := r.sweep(ctx, rq)
		if len(got) > 0 {
			if first {
				return got, 0, nil
			}
			return got, sweepStart.Sub(start), nil
		}
		if pe := (*PeerError)(nil); errors.As(err, &pe) {
			// No shard answered, and a leader is out of this node's
			// reach: a long poll here would wait on a dead path, not for
			// messages. The caller can try a node that reaches it.
			return nil, time.Since(start), err
		}
		remaining := time.Until(deadline)
		if remaining <= 0 {
			// Empty and out of time: an error only if every shard failed.
			return nil, time.Since(start), err
		}
		if werr := r.park(rq.GetQueue(), func() error { return r.waitAny(ctx, rq.GetQueue(), remaining) }); werr != nil {
			var full *ParkedFullError
			if errors.As(werr, &full) {
				return nil, time.Since(start), werr
			}
			if ctx.Err() != nil {
				return nil, time.Since(start), ctx.Err()
			}
			return nil, time.Since(start), nil
		}
	}
}

// sweep gathers the messages still wanted: first from one shard in
// rotation, asked for all of them, which under load fills the batch in one
// raft round; then, if that shard ran short, from the others in parallel,
// each for a share, so a shallow queue costs two rounds instead of one per
// shard. Shares never add up to more than is wanted, so nothing is leased
// that cannot be returned; a shard that filled its share may hold more and
// is asked again. (Asking every shard in parallel from the start made a
// saturated consumer wait for the slowest of three leaders each receive:
// processed/s fell by a third.) The error is non-nil only when no shard
// answered.
func (r *Router) sweep(ctx context.Context, rq *fsmpb.Receive) ([]Leased, error) {
	var out []Leased
	var firstErr error
	answered := 0
	var bytes uint64
	var leaderless []uint32
	var exhausted *ResultError // the last in-flight quota refusal
	ask := r.rotation()
	for pass := 0; len(ask) > 0; pass++ {
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
		now, later := ask[:1], ask[1:]
		if pass > 0 {
			now, later = splitAsk(ask, want, budget)
		}
		results := r.askShards(ctx, rq, now, want, budget)
		var more []uint32
		var refused *ResultError
		for _, a := range results {
			if a.err != nil {
				if ctx.Err() != nil {
					return out, ctx.Err()
				}
				if firstErr == nil {
					firstErr = a.err
				}
				var nl *raftgroup.NotLeaderError
				if errors.As(a.err, &nl) && nl.Waited {
					leaderless = append(leaderless, a.id)
				}
				continue
			}
			answered++
			if st := a.res.GetStatus(); st.GetCode() != fsmpb.Code_CODE_OK {
				if st.GetCode() == fsmpb.Code_CODE_RESOURCE_EXHAUSTED {
					// This shard is at an in-flight quota: the others may
					// still have room, so ask them before saying so.
					exhausted = &ResultError{Status: st}
					continue
				}
				// Keep what the other shards leased in this pass.
				refused = &ResultError{Status: st}
				continue
			}
			var got uint64
			msgs := a.res.GetReceive().GetMessages()
			for _, m := range msgs {
				out = append(out, Leased{Shard: a.id, Message: m})
				got += uint64(len(m.GetBody()))
			}
			bytes += got
			if a.mayHoldMore(len(msgs), got) {
				more = append(more, a.id)
			}
		}
		if refused != nil {
			return out, refused
		}
		ask = append(later, more...)
	}
	// Nothing leased and a shard is between leaders: wait for its election
	// as a single-shard receive would, one shard at a time. Once something
	// is held, return it rather than let its leases age in a wait.
	for _, id := range leaderless {
		if len(out) > 0 {
			break
		}
		res, err := r.receiveShard(ctx, id, shareOf(rq, int(rq.GetMax()), rq.GetMaxBytes()))
		if err != nil {
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			continue
		}
		answered++
		if st := res.GetStatus(); st.GetCode() != fsmpb.Code_CODE_OK {
			return out, &ResultError{Status: st}
		}
		for _, m := range res.GetReceive().GetMessages() {
			out = append(out, Leased{Shard: id, Message: m})
		}
	}
	if len(out) == 0 && exhausted != nil {
		return out, exhausted
	}
	if answered > 0 {
		return out, nil
	}
	return out, firstErr
}

// splitAsk picks the shards to ask in one pass: no more than want (each
// share is at least one message), and with a byte budget no more than the
// budget holds largest bodies, since a shard returns its first message even
// when it is larger than its share of the bytes.
func splitAsk(ask []uint32, want int, budget uint64) (now, later []uint32) {
	k := min(len(ask), want)
	if budget > 0 {
		k = min(k, max(1, int(budget/fsm.MaxBodyBytes)))
	}
	return ask[:k], ask[k:]
}

// asked is one shard's answer in a sweep pass.
type asked struct {
	id        uint32
	share     int
	byteShare uint64
	res       *fsmpb.Result
	err       error
}

// mayHoldMore reports whether the shard stopped at its share rather than
// running out of leasable messages: it filled its count, or the next body
// might not have fitted its bytes. A shard that leased nothing is done.
func (a asked) mayHoldMore(n int, got uint64) bool {
	if n == 0 {
		return false
	}
	return n >= a.share || (a.byteShare > 0 && got+fsm.MaxBodyBytes > a.byteShare)
}

// askShards asks each shard in ids for its share of want messages and
// budget bytes, all at once, and returns the answers in ids' order. Calls
// do not wait for elections: one leaderless shard must not hold up the
// leases the others grant.
func (r *Router) askShards(ctx context.Context, rq *fsmpb.Receive, ids []uint32, want int, budget uint64) []asked {
	out := make([]asked, len(ids))
	for i, id := range ids {
		out[i] = asked{id: id, share: want / len(ids), byteShare: budget / uint64(len(ids))}
		if i < want%len(ids) {
			out[i].share++
		}
	}
	plan := make([]Part, len(ids))
	for i, id := range ids {
		plan[i] = Part{Shard: id, Items: []int{i}}
	}
	answers := Scatter(ctx, plan, func(ctx context.Context, p Part) (*fsmpb.Result, error) {
		a := &out[p.Items[0]]
		return r.receiveShardWait(ctx, a.id, shareOf(rq, a.share, a.byteShare), 0)
	})
	for i, a := range answers {
		out[i].res, out[i].err = a.Value, a.Err
	}
	return out
}

// shareOf is rq narrowed to n messages and maxBytes body bytes.
func shareOf(rq *fsmpb.Receive, n int, maxBytes uint64) *fsmpb.Receive {
	return &fsmpb.Receive{Queue: rq.GetQueue(), Max: uint32(n), VisibilityTimeoutMs: rq.GetVisibilityTimeoutMs(), Consumer: rq.GetConsumer(), MaxBytes: maxBytes}
}

// receiveShard leases from one shard without waiting, waiting up to
// LeaderWait for it to elect a leader. The leader skips the raft write when
// nothing is leasable that other receives have not claimed (shard.Claim).
func (r *Router) receiveShard(ctx context.Context, id uint32, rq *fsmpb.Receive) (*fsmpb.Result, error) {
	return r.receiveShardWait(ctx, id, rq, r.opts.LeaderWait)
}

func (r *Router) receiveShardWait(ctx context.Context, id uint32, rq *fsmpb.Receive, leaderWait time.Duration) (*fsmpb.Result, error) {
	return callWait(ctx, r, id, leaderWait,
		func(ctx context.Context, sh *shard.Shard) (*fsmpb.Result, error) {
			return receiveLocal(ctx, sh, rq)
		},
		func(ctx context.Context, c peerpb.PeerClient, opts ...grpc.CallOption) (*fsmpb.Result, error) {
			resp, err := c.ShardReceive(ctx, &peerpb.ShardReceiveRequest{ShardId: id, Receive: rq}, opts...)
			if err != nil {
				return nil, err
			}
			return resp.GetResult(), nil
		})
}

// waitShard waits up to d at shard id's leader for queue to have leasable,
// unclaimed messages (shard.Wait); it leases nothing. ready is false when
// d passed first.
func (r *Router) waitShard(ctx context.Context, id uint32, queue string, d time.Duration) (ready bool, err error) {
	d = min(d, peer.MaxWait)
	return callWait(ctx, r, id, r.opts.LeaderWait,
		func(ctx context.Context, sh *shard.Shard) (bool, error) {
			if !sh.IsLeader() {
				lid, addr := sh.Leader()
				return false, &raftgroup.NotLeaderError{Group: shard.GroupName(id), LeaderID: string(lid), LeaderAddr: string(addr)}
			}
			wctx, cancel := context.WithTimeout(ctx, d)
			defer cancel()
			err := sh.Wait(wctx, queue)
			if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
				return false, nil // waited the full time: an answer, not a failure
			}
			return err == nil, err
		},
		func(ctx context.Context, c peerpb.PeerClient, opts ...grpc.CallOption) (bool, error) {
			resp, err := c.ShardWait(ctx, &peerpb.ShardWaitRequest{ShardId: id, Queue: queue, WaitMs: d.Milliseconds()}, opts...)
			if err != nil {
				return false, err
			}
			return resp.GetReady(), nil
		})
}

// waitAny blocks until some shard reports ready messages for queue, the
// time is up (nil) or ctx ends. Waits lease nothing, so cancelling the
// losers is harmless.
func (r *Router) waitAny(ctx context.Context, queue string, d time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	n := r.topo.ShardCount()
	type waited struct {
		ready bool
		err   error
	}
	done := make(chan waited, n)
	start := time.Now()
	for id := uint32(0); id < n; id++ {
		go func() {
			ready, err := r.waitShard(wctx, id, queue, d)
			done <- waited{ready, err}
		}()
	}
	failures := 0
	for range n {
		w := <-done
		if w.ready && wctx.Err() == nil {
			return nil // one shard has something
		}
		if w.err != nil {
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

// ParkedFullError refuses a long poll on a node that already holds
// Options.MaxParked of them, or a tenant's share of them; the sweep before
// it leased nothing.
type ParkedFullError struct {
	Max    int
	Tenant string // set when the tenant's share was the limit
	Share  int
}

func (e *ParkedFullError) Error() string {
	if e.Tenant != "" {
		return fmt.Sprintf("tenant %q holds %d parked long-poll receives on this node, its share of the %d it takes (--max-parked-receives): retry, or receive through another node", e.Tenant, e.Share, e.Max)
	}
	return fmt.Sprintf("this node holds %d parked long-poll receives, the most it takes (--max-parked-receives): retry, or receive through another node", e.Max)
}

// parkedCount counts parked long polls by tenant. A tenant that already
// parks some may hold an equal share with one more tenant, so one
// tenant's idle consumers cannot take every slot from another's.
type parkedCount struct {
	mu       sync.Mutex
	total    int
	byTenant map[string]int
}

func (c *parkedCount) add(tenant string, max int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.total >= max {
		return &ParkedFullError{Max: max}
	}
	if n := c.byTenant[tenant]; n > 0 {
		if share := max / (len(c.byTenant) + 1); n >= share {
			return &ParkedFullError{Max: max, Tenant: tenant, Share: n}
		}
	}
	if c.byTenant == nil {
		c.byTenant = map[string]int{}
	}
	c.byTenant[tenant]++
	c.total++
	return nil
}

func (c *parkedCount) done(tenant string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total--
	if c.byTenant[tenant]--; c.byTenant[tenant] == 0 {
		delete(c.byTenant, tenant)
	}
}

// parked runs a long poll's wait on queue, counted in Options.Parked
// meanwhile, or refuses it past Options.MaxParked or its tenant's share.
func (r *Router) park(queue string, wait func() error) error {
	if max := r.opts.MaxParked; max > 0 {
		tenant := fsm.TenantOf(queue)
		if err := r.parked.add(tenant, max); err != nil {
			return err
		}
		defer r.parked.done(tenant)
	}
	if r.opts.Parked != nil {
		r.opts.Parked(1)
		defer r.opts.Parked(-1)
	}
	return wait()
}

// ResultError carries an FSM whole-command refusal (e.g. queue not found).
type ResultError struct{ Status *fsmpb.Status }

func (e *ResultError) Error() string { return e.Status.GetMessage() }
