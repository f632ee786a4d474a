package server

import (
	"context"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
)

// QueueHeader names the queue a Send or SendBatch is for, in its
// metadata, so a node can refuse a send it has just refused before reading
// its body (Tap). Clients that do not set it lose nothing but the cheap
// refusal.
const QueueHeader = "raftq-queue"

// maxRefusing bounds the queues remembered as refusing; past it the
// oldest entries go first on the next note.
const maxRefusing = 4096

// refusals remembers, per queue, until when this node told senders to
// stay away (a RESOURCE_EXHAUSTED with a retry time: a quota, the shard
// leader's send queue, the node's memory or disk guard). A flood keeps
// sending regardless; answering its next sends from this record, before
// gRPC reads and decodes their bodies, keeps the node's CPU for the
// work it accepted (docs/tenancy.md, "Fairness").
type refusals struct {
	mu    sync.Mutex
	until map[string]refusal
}

type refusal struct {
	until time.Time
	msg   string
}

// note records that queue was refused with msg, to come back after retry.
func (r *refusals) note(queue, msg string, retry time.Duration, now time.Time) {
	if queue == "" || retry <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.until == nil {
		r.until = map[string]refusal{}
	}
	if len(r.until) >= maxRefusing {
		for q, f := range r.until {
			if !now.Before(f.until) {
				delete(r.until, q)
			}
		}
		if len(r.until) >= maxRefusing {
			return
		}
	}
	r.until[queue] = refusal{until: now.Add(retry), msg: msg}
}

// check returns the standing refusal of queue, if any.
func (r *refusals) check(queue string, now time.Time) (left time.Duration, msg string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, found := r.until[queue]
	if !found {
		return 0, "", false
	}
	if !now.Before(f.until) {
		delete(r.until, queue)
		return 0, "", false
	}
	return f.until.Sub(now), f.msg, true
}

// Tap is the client port's grpc.InTapHandle: it refuses a Send or
// SendBatch for a queue this node refused moments ago, with what it said
// then and the time left, before the request's body is read. It runs on
// the connection's reader, so it only looks up a map.
func (s *Server) Tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	switch info.FullMethodName {
	case "/raftq.v1.Messages/Send", "/raftq.v1.Messages/SendBatch":
	default:
		return ctx, nil
	}
	q := info.Header.Get(QueueHeader)
	if len(q) != 1 {
		return ctx, nil
	}
	if left, msg, ok := s.refused.check(q[0], time.Now()); ok {
		return ctx, exhausted(msg, left)
	}
	return ctx, nil
}

// noteRefusal remembers a send's refusal for Tap when it carries a retry
// time and holds for the whole queue: on a cluster of one shard, or a
// refusal of the node's own (memory, disk), not one shard's quota share
// or send queue, which says nothing of the queue's other shards.
func (s *Server) noteRefusal(queue string, err error) {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted {
		return
	}
	if ms := retryMs(err); ms > 0 && (s.router.ShardCount() == 1 || nodeWide(st.Message())) {
		s.refused.note(queue, st.Message(), time.Duration(ms)*time.Millisecond, time.Now())
	}
}

// nodeWide reports a refusal of the node's memory or disk guard, which
// holds for every shard (shard.MemoryFullError, shard.DiskFullError).
func nodeWide(msg string) bool {
	return strings.Contains(msg, "memory near its budget") || strings.Contains(msg, "disk almost full")
}

// noteBatchRefusal remembers a batch for Tap when every item of it was
// refused with a retry time, for the shortest of them (a batch of which
// some went in shows the queue still takes sends), and the refusal holds
// for the whole queue (noteRefusal).
func (s *Server) noteBatchRefusal(queue string, results []*raftqv1.SendResult) {
	var retry int64
	msg := ""
	for _, r := range results {
		if codes.Code(r.GetCode()) != codes.ResourceExhausted || r.GetRetryAfterMs() <= 0 {
			return
		}
		if retry == 0 || r.GetRetryAfterMs() < retry {
			retry, msg = r.GetRetryAfterMs(), r.GetError()
		}
	}
	if s.router.ShardCount() == 1 || nodeWide(msg) {
		s.refused.note(queue, msg, time.Duration(retry)*time.Millisecond, time.Now())
	}
}
