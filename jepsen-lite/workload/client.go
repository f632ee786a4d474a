// Package workload drives raftq with concurrent logical clients over raw
// gRPC stubs and records every operation in the history: invoke before the
// call, then ok, fail (certainly no effect) or info (outcome unknown). A
// client whose operation ends in info takes a new process id, as in Jepsen,
// because its earlier operation may still be in flight.
package workload

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/jepsen-lite/history"
)

// LeaderTrailer marks a refusal: the node applied nothing.
const LeaderTrailer = "raftq-leader"

// Env is what every client shares.
type Env struct {
	Rec   *history.Recorder
	Conns []*grpc.ClientConn
	Addrs []string
	// CallTimeout bounds each call beyond its long-poll wait.
	CallTimeout time.Duration
	// Members lists the slots of Conns that hold cluster members now
	// (nil: all of them); the membership nemesis changes it.
	Members func() []int
	procs   atomic.Int64
}

// Nodes lists the slots of Conns clients may use now.
func (e *Env) Nodes() []int {
	if e.Members != nil {
		if m := e.Members(); len(m) > 0 {
			return m
		}
	}
	out := make([]int, len(e.Conns))
	for i := range out {
		out[i] = i
	}
	return out
}

// MemberConns are the connections to the members.
func (e *Env) MemberConns() []*grpc.ClientConn {
	var out []*grpc.ClientConn
	for _, i := range e.Nodes() {
		out = append(out, e.Conns[i])
	}
	return out
}

// Client is one logical process: one operation at a time.
type Client struct {
	env  *Env
	proc int
	rng  *rand.Rand
	pin  int // node slot to use, or -1 for a random member per call
	// QueueHeader names the queue of each send in the raftq-queue header,
	// as the Go client does, so that a node that refused the queue's
	// sends moments ago refuses the next ones at its gRPC tap, before
	// reading them (server/admission.go): that refusal must carry a
	// retry time too.
	QueueHeader bool
}

// NewClient returns a client with a fresh process id and its own random
// stream derived from seed.
func (e *Env) NewClient(seed uint64) *Client {
	return &Client{env: e, proc: int(e.procs.Add(1)), rng: rand.New(rand.NewPCG(seed, uint64(e.procs.Load()))), pin: -1}
}

// Crash forgets the client's state by taking a new process id.
func (c *Client) Crash() { c.proc = int(c.env.procs.Add(1)) }

// Process is the client's current process id.
func (c *Client) Process() int { return c.proc }

func (c *Client) node() int {
	if c.pin >= 0 {
		return c.pin
	}
	m := c.env.Nodes()
	return m[c.rng.IntN(len(m))]
}

// Pin sends every later call to node slot i (-1: a random member again).
func (c *Client) Pin(i int) { c.pin = i }

// Classify maps a call's error to a completion type. Only answers that
// prove nothing was applied are fail.
func Classify(err error, trailer metadata.MD) (typ, code, msg string) {
	if err == nil {
		return history.OK, "", ""
	}
	st, _ := status.FromError(err)
	code, msg = st.Code().String(), st.Message()
	switch st.Code() {
	case codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition, codes.AlreadyExists,
		codes.ResourceExhausted, codes.PermissionDenied, codes.Unauthenticated, codes.Unimplemented:
		return history.Fail, code, msg
	case codes.Unavailable:
		if _, refused := trailer[LeaderTrailer]; refused {
			return history.Fail, code, msg
		}
		// The transport never connected: nothing was sent.
		if strings.Contains(msg, "while dialing") {
			return history.Fail, code, msg
		}
	}
	return history.Info, code, msg
}

// queueHeader is the metadata key the Go client names a send's queue
// under (client/send.go, server.QueueHeader).
const queueHeader = "raftq-queue"

// Refusal classifies a RESOURCE_EXHAUSTED answer: its note (history.NoteQuota
// when the server names a quota, history.NoteExhausted for a node's own
// limits) and the retry time it carried, rounded up to whole milliseconds
// (0: none). Other errors give "" and 0.
func Refusal(err error) (note string, retryMs int64) {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted {
		return "", 0
	}
	note = history.NoteExhausted
	if strings.Contains(st.Message(), "quota") {
		note = history.NoteQuota
	}
	// A retry time below a millisecond (a tap refusal about to lapse) is
	// still one: round up rather than record it as missing.
	if d, ok := client.RetryAfter(err); ok && d > 0 {
		retryMs = int64((d + time.Millisecond - 1) / time.Millisecond)
	}
	return note, retryMs
}

// call runs fn against a random node, recording invoke and completion.
// fill adds the answer to the completion; it runs only on success.
func (c *Client) call(ctx context.Context, inv history.Op, extra time.Duration, fn func(ctx context.Context, cc *grpc.ClientConn, opts ...grpc.CallOption) (func(*history.Op), error)) history.Op {
	if ctx.Err() != nil {
		return history.Op{} // the run is over: send nothing, record nothing
	}
	i := c.node()
	inv.Type, inv.Process, inv.Node = history.Invoke, c.proc, c.env.Addrs[i]
	c.env.Rec.Add(inv)
	cctx, cancel := context.WithTimeout(ctx, c.env.CallTimeout+extra)
	defer cancel()
	var md metadata.MD
	fill, err := fn(cctx, c.env.Conns[i], grpc.Trailer(&md))
	done := history.Op{F: inv.F, Process: c.proc, Node: inv.Node, Queue: inv.Queue, Value: inv.Value, MessageID: inv.MessageID, Epoch: inv.Epoch}
	done.Type, done.Code, done.Error = Classify(err, md)
	done.Note, done.RetryAfterMs = Refusal(err)
	if err == nil && fill != nil {
		fill(&done)
	}
	out := c.env.Rec.Add(done)
	if out.Type == history.Info {
		c.Crash()
	}
	return out
}

// Enqueue sends one unique value with its dedup key.
func (c *Client) Enqueue(ctx context.Context, queue, group, value, key string) history.Op {
	inv := history.Op{F: history.FEnqueue, Queue: queue, Group: group, Value: value, DedupKey: key}
	return c.call(ctx, inv, 0, func(ctx context.Context, cc *grpc.ClientConn, opts ...grpc.CallOption) (func(*history.Op), error) {
		if c.QueueHeader {
			ctx = metadata.AppendToOutgoingContext(ctx, queueHeader, queue)
		}
		resp, err := raftqv1.NewMessagesClient(cc).Send(ctx, &raftqv1.SendRequest{Queue: queue, Body: []byte(value), GroupId: group, DedupKey: key}, opts...)
		return func(op *history.Op) { op.MessageID, op.Deduplicated = resp.GetMessageId(), resp.GetDeduplicated() }, err
	})
}

// Receive leases up to max messages for vis.
func (c *Client) Receive(ctx context.Context, queue string, max int, wait, vis time.Duration) (history.Op, []history.Delivery) {
	inv := history.Op{F: history.FReceive, Queue: queue, VisibilityMs: vis.Milliseconds()}
	op := c.call(ctx, inv, wait, func(ctx context.Context, cc *grpc.ClientConn, opts ...grpc.CallOption) (func(*history.Op), error) {
		resp, err := raftqv1.NewMessagesClient(cc).Receive(ctx, &raftqv1.ReceiveRequest{
			Queue: queue, MaxMessages: uint32(max), WaitMs: wait.Milliseconds(), VisibilityTimeoutMs: vis.Milliseconds(),
			Consumer: "p" + strconv.Itoa(c.proc),
		}, opts...)
		return func(op *history.Op) {
			for _, m := range resp.GetMessages() {
				op.Deliveries = append(op.Deliveries, history.Delivery{
					MessageID: m.GetMessageId(), Receipt: m.GetReceipt(), Epoch: m.GetLeaseEpoch(),
					ReceiveCount: m.GetReceiveCount(), DeadlineMs: m.GetLeaseDeadlineMs(),
					Value: string(m.GetBody()), Group: m.GetGroupId(),
				})
			}
		}, err
	})
	return op, op.Deliveries
}

// Ack acknowledges one delivery. A per-item error is a definite answer.
func (c *Client) Ack(ctx context.Context, d history.Delivery) history.Op {
	inv := history.Op{F: history.FAck, MessageID: d.MessageID, Epoch: d.Epoch, Receipt: d.Receipt}
	return c.call(ctx, inv, 0, func(ctx context.Context, cc *grpc.ClientConn, opts ...grpc.CallOption) (func(*history.Op), error) {
		resp, err := raftqv1.NewMessagesClient(cc).Ack(ctx, &raftqv1.AckRequest{Receipts: []string{d.Receipt}}, opts...)
		if err == nil && len(resp.GetResults()) == 1 && resp.GetResults()[0].GetCode() != 0 {
			r := resp.GetResults()[0]
			err = status.Error(codes.Code(r.GetCode()), r.GetError())
		}
		return nil, err
	})
}

// Nack releases one delivery after delay.
func (c *Client) Nack(ctx context.Context, d history.Delivery, delay time.Duration) history.Op {
	inv := history.Op{F: history.FNack, MessageID: d.MessageID, Epoch: d.Epoch, Receipt: d.Receipt}
	return c.call(ctx, inv, 0, func(ctx context.Context, cc *grpc.ClientConn, opts ...grpc.CallOption) (func(*history.Op), error) {
		_, err := raftqv1.NewMessagesClient(cc).Nack(ctx, &raftqv1.NackRequest{Receipt: d.Receipt, HasDelay: true, DelayMs: delay.Milliseconds(), Error: "jepsen-lite nack"}, opts...)
		return nil, err
	})
}

// Extend pushes the lease of d to vis from now (shard clock).
func (c *Client) Extend(ctx context.Context, d history.Delivery, vis time.Duration) history.Op {
	inv := history.Op{F: history.FExtend, MessageID: d.MessageID, Epoch: d.Epoch, Receipt: d.Receipt, VisibilityMs: vis.Milliseconds()}
	return c.call(ctx, inv, 0, func(ctx context.Context, cc *grpc.ClientConn, opts ...grpc.CallOption) (func(*history.Op), error) {
		resp, err := raftqv1.NewMessagesClient(cc).ExtendLease(ctx, &raftqv1.ExtendLeaseRequest{Receipt: d.Receipt, VisibilityTimeoutMs: vis.Milliseconds()}, opts...)
		return func(op *history.Op) { op.DeadlineMs = resp.GetLeaseDeadlineMs() }, err
	})
}

// Publish sends one unique value to a topic with its dedup key, type and
// attributes; the answer says how many subscriptions got a copy.
func (c *Client) Publish(ctx context.Context, topic, group, value, key, typ string, attrs map[string]string) history.Op {
	inv := history.Op{F: history.FPublish, Queue: topic, Group: group, Value: value, DedupKey: key, MsgType: typ, Attrs: attrs}
	return c.call(ctx, inv, 0, func(ctx context.Context, cc *grpc.ClientConn, opts ...grpc.CallOption) (func(*history.Op), error) {
		resp, err := raftqv1.NewMessagesClient(cc).Send(ctx, &raftqv1.SendRequest{Queue: topic, Body: []byte(value), GroupId: group,
			DedupKey: key, Type: typ, Attributes: attrs}, opts...)
		return func(op *history.Op) {
			op.MessageID, op.Deduplicated, op.Copies = resp.GetMessageId(), resp.GetDeduplicated(), resp.GetDeliveries()
		}, err
	})
}

// DeadLetter moves one delivery to its queue's DLQ at once (reason POISON).
func (c *Client) DeadLetter(ctx context.Context, d history.Delivery) history.Op {
	inv := history.Op{F: history.FDeadLetter, MessageID: d.MessageID, Epoch: d.Epoch, Receipt: d.Receipt}
	return c.call(ctx, inv, 0, func(ctx context.Context, cc *grpc.ClientConn, opts ...grpc.CallOption) (func(*history.Op), error) {
		_, err := raftqv1.NewMessagesClient(cc).DeadLetter(ctx, &raftqv1.DeadLetterRequest{Receipt: d.Receipt, Error: "jepsen-lite poison"}, opts...)
		return nil, err
	})
}

// Subscribe creates a topic (sub.Topic == name) or a subscription of
// sub.Topic with policy, one attempt, recorded with sub so that the
// checker knows the fan-out topology and when each part existed.
func (c *Client) Subscribe(ctx context.Context, name string, sub *history.Subscription, policy *raftqv1.QueuePolicy) history.Op {
	inv := history.Op{F: history.FSubscribe, Queue: name, Sub: sub}
	return c.call(ctx, inv, 0, func(ctx context.Context, cc *grpc.ClientConn, opts ...grpc.CallOption) (func(*history.Op), error) {
		_, err := raftqv1.NewQueuesClient(cc).CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: name, Policy: policy}, opts...)
		return func(op *history.Op) { op.Sub = sub }, err
	})
}
