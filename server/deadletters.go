package server

import (
	"context"
	"fmt"
	"time"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/wire"
)

// Redrive pacing: SQS caps redrive near 500 messages/s; we default lower so
// a redrive of a large DLQ cannot swamp the consumers it feeds.
const (
	defaultRedriveRate = 100
	maxRedriveRate     = 500
	redriveTick        = 100 * time.Millisecond
	maxDeadList        = 1000
)

type deadLetters struct {
	*Server
	raftqv1.UnimplementedDeadLettersServer
}

func (d *deadLetters) ListDead(ctx context.Context, req *raftqv1.ListDeadRequest) (*raftqv1.ListDeadResponse, error) {
	if err := validateQueue(req.GetQueue(), nil); err != nil {
		return nil, err
	}
	limit := req.GetLimit()
	if limit == 0 {
		limit = defaultDeadList
	}
	if limit > maxDeadList {
		return nil, invalid("limit %d above %d", limit, maxDeadList)
	}
	if err := validateDeadFilter(req.GetFilter()); err != nil {
		return nil, err
	}
	if err := d.ready(ctx); err != nil {
		return nil, err
	}
	// Shards answer an empty list for a queue they do not hold, which would
	// pass for an empty DLQ.
	if _, err := d.lookupQueue(ctx, req.GetQueue()); err != nil {
		return nil, err
	}
	var after *deadCursor
	if t := req.GetPageToken(); t != "" {
		c, err := parseDeadToken(t)
		if err != nil {
			return nil, err
		}
		after = &c
	}
	page, err := d.listDead(ctx, req.GetQueue(), req.GetFilter(), after, limit)
	if err != nil {
		return nil, err
	}
	resp := &raftqv1.ListDeadResponse{}
	for _, l := range page.items {
		resp.Messages = append(resp.Messages, l.info)
	}
	if page.next != nil {
		resp.NextPageToken = page.next.token()
	}
	return resp, nil
}

// byShard groups public message ids per shard. Callers check ready
// first: without a map every id would look out of range.
func (s *Server) byShard(ids []string) (map[uint32][]uint64, error) {
	out := map[uint32][]uint64{}
	n := s.router.ShardCount()
	for _, id := range ids {
		mid, err := wire.ParseMessageID(id)
		if err != nil {
			return nil, invalid("%v", err)
		}
		if mid.Shard >= n {
			return nil, invalid("message id %s names shard %d, the cluster has %d", id, mid.Shard, n)
		}
		out[mid.Shard] = append(out[mid.Shard], mid.ID)
	}
	return out, nil
}

// paced runs step once per tick with a budget of rate*tick messages until
// every shard reports nothing left, so the total rate holds across shards.
func (s *Server) paced(ctx context.Context, rate uint32, ids map[uint32][]uint64, all bool,
	step func(shard uint32, ids []uint64, max uint32) *fsmpb.Command) (uint64, error) {
	per := max(1, rate*uint32(redriveTick/time.Millisecond)/1000)
	var done uint64
	pending := map[uint32][]uint64{}
	for id, l := range ids {
		pending[id] = l
	}
	if all {
		for id := uint32(0); id < s.router.ShardCount(); id++ {
			pending[id] = nil
		}
	}
	tick := time.NewTicker(redriveTick)
	defer tick.Stop()
	for len(pending) > 0 {
		budget := per
		for id := range pending {
			if budget == 0 {
				break
			}
			chunk := pending[id]
			n := budget
			if !all {
				n = min(budget, uint32(len(chunk)))
				chunk = chunk[:n]
			}
			res, err := s.router.Apply(ctx, id, step(id, chunk, n))
			if err != nil {
				return done, s.toStatus(ctx, fmt.Errorf("shard %d after %d messages: %w", id, done, err))
			}
			if err := resultStatus(res.GetStatus()); err != nil {
				return done, err
			}
			c := res.GetCount().GetCount()
			done += c
			budget -= min(budget, uint32(c))
			if all {
				if c < uint64(n) {
					delete(pending, id)
				}
			} else {
				pending[id] = pending[id][len(chunk):]
				if len(pending[id]) == 0 {
					delete(pending, id)
				}
			}
		}
		if len(pending) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return done, s.toStatus(ctx, fmt.Errorf("stopped after %d messages: %w", done, ctx.Err()))
		case <-tick.C:
		}
	}
	return done, nil
}

func (d *deadLetters) Redrive(ctx context.Context, req *raftqv1.RedriveRequest) (*raftqv1.RedriveResponse, error) {
	if err := d.ready(ctx); err != nil {
		return nil, err
	}
	if _, err := d.lookupQueue(ctx, req.GetQueue()); err != nil {
		return nil, err
	}
	rate := req.GetRatePerS()
	if rate == 0 {
		rate = defaultRedriveRate
	}
	if rate > maxRedriveRate {
		return nil, invalid("rate_per_s %d above the limit %d", rate, maxRedriveRate)
	}
	if err := validateDeadFilter(req.GetFilter()); err != nil {
		return nil, err
	}
	if req.GetFilter() != nil && len(req.GetMessageIds()) > 0 {
		return nil, invalid("give message_ids or a filter, not both")
	}
	target := req.GetTargetQueue()
	var targetInfo *raftqv1.QueueInfo
	if target != "" {
		if target == req.GetQueue() {
			return nil, invalid("target_queue is the queue itself: leave it empty to redrive in place")
		}
		info, err := d.lookupQueue(ctx, target)
		if err != nil {
			return nil, err
		}
		targetInfo = info
		// The copies are sends to the target: the caller must be allowed
		// to send there, beyond managing the source.
		if err := allowed(ctx, "/raftq.v1.DeadLetters/Redrive", permSend, target); err != nil {
			return nil, err
		}
	}
	ids, err := d.byShard(req.GetMessageIds())
	if err != nil {
		return nil, err
	}
	src := d.listedSource(req.GetQueue(), pinUntil(req.GetFilter(), time.Now()))
	if len(req.GetMessageIds()) > 0 {
		src = d.namedSource(req.GetQueue(), req.GetMessageIds())
	}
	switch {
	case req.GetDryRun():
		return dryRun(ctx, src)
	case target != "":
		n, err := d.moveEach(ctx, rate, src, d.moveTo(req.GetQueue(), targetInfo))
		if err != nil {
			return nil, err
		}
		return &raftqv1.RedriveResponse{Redriven: n}, nil
	case req.GetFilter() != nil:
		n, err := d.moveEach(ctx, rate, src, d.moveInPlace(req.GetQueue()))
		if err != nil {
			return nil, err
		}
		return &raftqv1.RedriveResponse{Redriven: n}, nil
	}
	n, err := d.paced(ctx, rate, ids, len(req.GetMessageIds()) == 0, func(_ uint32, ids []uint64, max uint32) *fsmpb.Command {
		return &fsmpb.Command{Cmd: &fsmpb.Command_Redrive{Redrive: &fsmpb.Redrive{Queue: req.GetQueue(), MessageIds: ids, Max: max}}}
	})
	if err != nil {
		return nil, err
	}
	return &raftqv1.RedriveResponse{Redriven: n}, nil
}

func (d *deadLetters) Discard(ctx context.Context, req *raftqv1.DiscardRequest) (*raftqv1.DiscardResponse, error) {
	if err := d.ready(ctx); err != nil {
		return nil, err
	}
	if _, err := d.lookupQueue(ctx, req.GetQueue()); err != nil {
		return nil, err
	}
	ids, err := d.byShard(req.GetMessageIds())
	if err != nil {
		return nil, err
	}
	// Discarding is not rate-limited (it feeds no consumer); large steps.
	n, err := d.paced(ctx, 10000, ids, len(req.GetMessageIds()) == 0, func(_ uint32, ids []uint64, max uint32) *fsmpb.Command {
		return &fsmpb.Command{Cmd: &fsmpb.Command_DiscardDead{DiscardDead: &fsmpb.DiscardDead{Queue: req.GetQueue(), MessageIds: ids, Max: max}}}
	})
	if err != nil {
		return nil, err
	}
	return &raftqv1.DiscardResponse{Discarded: n}, nil
}
