package server

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/peer/peerpb"
	"github.com/raftq/raftq/router"
	"github.com/raftq/raftq/wire"
	"google.golang.org/protobuf/proto"
)

// listedDead is one dead message of a listing with its place in the
// cluster-wide order.
type listedDead struct {
	at    deadCursor
	msg   *fsmpb.Message
	info  *raftqv1.MessageInfo
	bytes int
}

// deadPage is one page of a dead listing; next is where the following page
// starts, nil when none may follow.
type deadPage struct {
	items []listedDead
	next  *deadCursor
}

// validateDeadFilter answers InvalidArgument for a filter no message could
// be meant by.
func validateDeadFilter(f *raftqv1.DeadFilter) error {
	switch {
	case len(f.GetType()) > fsm.MaxTypeLen:
		return invalid("filter type is %d bytes, limit %d", len(f.GetType()), fsm.MaxTypeLen)
	case len(f.GetErrorContains()) > fsm.MaxErrorLen:
		return invalid("filter error_contains is %d bytes, limit %d", len(f.GetErrorContains()), fsm.MaxErrorLen)
	case f.GetDeadSinceMs() < 0 || f.GetDeadUntilMs() < 0:
		return invalid("filter dead_since_ms and dead_until_ms must not be negative")
	case f.GetDeadUntilMs() > 0 && f.GetDeadUntilMs() <= f.GetDeadSinceMs():
		return invalid("filter dead_until_ms %d is not after dead_since_ms %d", f.GetDeadUntilMs(), f.GetDeadSinceMs())
	}
	return nil
}

func deadFilterToPeer(f *raftqv1.DeadFilter) *peerpb.DeadFilter {
	if f == nil {
		return nil
	}
	return &peerpb.DeadFilter{Type: f.GetType(), ErrorContains: f.GetErrorContains(), DeadSinceMs: f.GetDeadSinceMs(), DeadUntilMs: f.GetDeadUntilMs()}
}

// listDead reads one page of queue's dead messages that filter matches,
// after the cursor (nil: from the oldest), oldest death first across
// shards. Each shard sends up to limit matches; a shard that stopped at
// its scan budget (fsm.MaxDeadScan) bounds the page at the record it
// reached, since past it that shard's matches are unknown: the page may
// then be short, or empty, and still have a next.
func (s *Server) listDead(ctx context.Context, queue string, filter *raftqv1.DeadFilter, after *deadCursor, limit uint32) (deadPage, error) {
	plan, err := s.router.PlanShards()
	if err != nil {
		return deadPage{}, s.toStatus(ctx, err)
	}
	answers := router.Scatter(ctx, plan, func(ctx context.Context, p router.Part) (*peerpb.ShardReadResponse, error) {
		rq := &peerpb.ShardReadRequest{ShardId: p.Shard, Query: &peerpb.ShardReadRequest_ListDeadQueue{ListDeadQueue: queue},
			Limit: limit, DeadFilter: deadFilterToPeer(filter)}
		if after != nil {
			ms, id := after.from(p.Shard)
			rq.DeadFrom = &peerpb.DeadCursor{Ms: ms, Id: id}
		}
		return s.router.Read(ctx, rq)
	})
	parts := make([]shardDead, 0, len(answers))
	for _, a := range answers {
		if a.Err != nil {
			return deadPage{}, s.toStatus(ctx, fmt.Errorf("list dead on shard %d: %w", a.Shard, a.Err))
		}
		parts = append(parts, refilter(shardDead{shard: a.Shard, dead: a.Value.GetDead(), scannedTo: a.Value.GetDeadScannedTo()}, filter, limit))
	}
	return mergeDead(parts, limit), nil
}

// pinUntil bounds a redrive's listing to messages dead before it starts:
// one it redrives in place that dies again while the call runs dies later,
// and would be met again and again (a poison job would keep the call
// going until its caller gave up). now is this node's clock; the shard's
// is its leader's, within the cluster's clock bound, so a message that
// died in the last moment before the call may be left for the next one.
func pinUntil(f *raftqv1.DeadFilter, now time.Time) *raftqv1.DeadFilter {
	out := &raftqv1.DeadFilter{}
	if f != nil {
		out = proto.Clone(f).(*raftqv1.DeadFilter)
	}
	if until := now.UnixMilli() + 1; out.GetDeadUntilMs() == 0 || out.GetDeadUntilMs() > until {
		out.DeadUntilMs = until
	}
	return out
}

// refilter applies filter to a shard's answer again. A shard leader on a
// binary older than the filter ignores the field and sends every dead
// message: a filtered redrive would then move what the filter leaves out.
// When the shard sent a full answer and some of it is dropped here, the
// page may only go as far as the last record the shard sent
// (scannedTo), as when a shard's scan budget runs out.
func refilter(p shardDead, f *raftqv1.DeadFilter, limit uint32) shardDead {
	if f == nil || len(p.dead) == 0 {
		return p
	}
	kept := p.dead[:0:0]
	for _, m := range p.dead {
		if deadMatches(m, f) {
			kept = append(kept, m)
		}
	}
	if len(kept) < len(p.dead) && len(p.dead) >= int(limit) && p.scannedTo == nil {
		last := p.dead[len(p.dead)-1]
		p.scannedTo = &peerpb.DeadCursor{Ms: last.GetStateChangedMs(), Id: last.GetId()}
	}
	p.dead = kept
	return p
}

// deadMatches is the shard's filter (fsm/deadlist.go) on a listed record.
func deadMatches(m *fsmpb.Message, f *raftqv1.DeadFilter) bool {
	died := m.GetStateChangedMs()
	return (f.GetType() == "" || m.GetType() == f.GetType()) &&
		(f.GetErrorContains() == "" || strings.Contains(m.GetLastError(), f.GetErrorContains())) &&
		died >= f.GetDeadSinceMs() && (f.GetDeadUntilMs() == 0 || died < f.GetDeadUntilMs())
}

// shardDead is one shard's answer to a dead listing.
type shardDead struct {
	shard     uint32
	dead      []*fsmpb.Message
	scannedTo *peerpb.DeadCursor
}

// mergeDead makes one page of the shards' answers, each up to limit
// matches in the shard's order.
func mergeDead(parts []shardDead, limit uint32) deadPage {
	var all []listedDead
	var horizon *deadCursor
	more := false // a shard may hold more than it sent
	for _, p := range parts {
		more = more || len(p.dead) >= int(limit)
		if c := p.scannedTo; c != nil {
			h := deadCursor{ms: c.GetMs(), shard: p.shard, id: c.GetId()}
			if horizon == nil || h.before(*horizon) {
				horizon = &h
			}
		}
		for _, m := range p.dead {
			info := &raftqv1.MessageInfo{MessageId: wire.MessageID{Shard: p.shard, ID: m.GetId()}.String(), Message: messageFromFSM(m)}
			all = append(all, listedDead{
				at:    deadCursor{ms: m.GetStateChangedMs(), shard: p.shard, id: m.GetId()},
				msg:   m,
				info:  info,
				bytes: proto.Size(info),
			})
		}
	}
	// Oldest death first across shards, like one queue; ties by shard and
	// id, the order the page token resumes in.
	sort.Slice(all, func(i, j int) bool { return all[i].at.before(all[j].at) })
	var page deadPage
	size := 0
	full := false // the page stopped at limit or at its byte bound
	for i, l := range all {
		if horizon != nil && horizon.before(l.at) {
			break
		}
		if i == int(limit) || (i > 0 && size+l.bytes > maxPageBytes) {
			full = true
			break
		}
		page.items = append(page.items, l)
		size += l.bytes
	}
	switch {
	case full && len(page.items) > 0:
		last := page.items[len(page.items)-1].at
		page.next = &last
	case horizon != nil:
		// Every match up to the horizon is on the page; go on after it.
		page.next = horizon
	case more && len(page.items) > 0:
		last := page.items[len(page.items)-1].at
		page.next = &last
	}
	return page
}
