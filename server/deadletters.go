package server

import (
	"context"
	"fmt"
	"sort"
	"time"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/peer/peerpb"
	"github.com/raftq/raftq/router"
	"github.com/raftq/raftq/wire"
	"google.golang.org/protobuf/proto"
)

// Redrive pacing: SQS caps redrive near 500 messages/s; we default lower so
// a redrive of a large DLQ cannot swamp the consumers it feeds.
const (
	defaultRedriveRate = 100
	maxRedriveRate     = 500
	redriveTick        = 100 * time.Millisecond
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
	if limit > 1000 {
		return nil, invalid("limit %d above 1000", limit)
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
	plan, err := d.router.PlanShards()
	if err != nil {
		return nil, d.toStatus(ctx, err)
	}
	answers := router.Scatter(ctx, plan, func(ctx context.Context, p router.Part) (*peerpb.ShardReadResponse, error) {
		rq := &peerpb.ShardReadRequest{ShardId: p.Shard, Query: &peerpb.ShardReadRequest_ListDeadQueue{ListDeadQueue: req.GetQueue()}, Limit: limit}
		if after != nil {
			ms, id := after.from(p.Shard)
			rq.DeadFrom = &peerpb.DeadCursor{Ms: ms, Id: id}
		}
		return d.router.Read(ctx, rq)
	})
	type listed struct {
		at   deadCursor
		info *raftqv1.MessageInfo
	}
	var all []listed
	more := false // a shard may hold more than it sent
	for _, a := range answers {
		if a.Err != nil {
			return nil, d.toStatus(ctx, fmt.Errorf("list dead on shard %d: %w", a.Shard, a.Err))
		}
		dead := a.Value.GetDead()
		more = more || len(dead) >= int(limit)
		for _, m := range dead {
			all = append(all, listed{
				at:   deadCursor{ms: m.GetStateChangedMs(), shard: a.Shard, id: m.GetId()},
				info: &raftqv1.MessageInfo{MessageId: wire.MessageID{Shard: a.Shard, ID: m.GetId()}.String(), Message: messageFromFSM(m)},
			})
		}
	}
	// Oldest death first across shards, like one queue; ties by shard and
	// id, the order the page token resumes in.
	sort.Slice(all, func(i, j int) bool { return all[i].at.before(all[j].at) })
	resp := &raftqv1.ListDeadResponse{}
	size := 0
	for i, l := range all {
		n := proto.Size(l.info)
		if i == int(limit) || (i > 0 && size+n > maxPageBytes) {
			more = true
			break
		}
		resp.Messages = append(resp.Messages, l.info)
		size += n
	}
	if more && len(resp.Messages) > 0 {
		resp.NextPageToken = all[len(resp.Messages)-1].at.token()
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
	ids, err := d.byShard(req.GetMessageIds())
	if err != nil {
		return nil, err
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
