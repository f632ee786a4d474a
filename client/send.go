package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"google.golang.org/protobuf/proto"
	"maps"
	"strconv"
	"time"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/wire"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Outgoing is one message to send. Send builds it from SendOptions; SendBatch
// takes it directly.
type Outgoing struct {
	Body       []byte
	Group      string // message group: per-group FIFO on FIFO queues, and shard placement
	DedupKey   string
	Delay      time.Duration // up to MaxDelay; 0: the queue's default delay
	RunAt      time.Time     // wins over Delay when set
	Priority   uint32        // 0-9, higher first
	Attributes map[string]string
	Type       string
	// UniqueFor, with DedupKey, holds the key for this long (at most
	// MaxRetention) instead of the queue's dedup window.
	UniqueFor time.Duration
	// UniqueUntilDone, with DedupKey, releases the key once the message is
	// acked, dead-lettered, cancelled or purged (with UniqueFor, at
	// whichever comes first; alone, it holds the key while the job is
	// pending or running).
	UniqueUntilDone bool
	// MaxReceives, BackoffBase and BackoffMax override the queue's retry
	// policy for this message; zero keeps the queue's.
	MaxReceives uint32
	BackoffBase time.Duration
	BackoffMax  time.Duration
}

// SendOption sets a field of an Outgoing message.
type SendOption func(*Outgoing)

// Group sets the message group.
func Group(g string) SendOption { return func(o *Outgoing) { o.Group = g } }

// DedupKey sets the dedup key: a second send with the same key within the
// queue's dedup window returns the first message's id and enqueues nothing.
func DedupKey(k string) SendOption { return func(o *Outgoing) { o.DedupKey = k } }

// Unique makes the message a unique job with key k (its dedup key): while
// the key is held, a send with it enqueues nothing and returns the holder's
// id with Deduplicated set. Scopes: UniqueFor and UniqueUntilDone; with
// neither, the queue's dedup window (like DedupKey). docs/jobs.md.
func Unique(k string, scopes ...UniqueScope) SendOption {
	return func(o *Outgoing) {
		o.DedupKey = k
		for _, s := range scopes {
			s(o)
		}
	}
}

// UniqueScope says how long a unique job's key is held.
type UniqueScope func(*Outgoing)

// UniqueFor holds the key for d from the send, instead of the queue's dedup
// window.
func UniqueFor(d time.Duration) UniqueScope { return func(o *Outgoing) { o.UniqueFor = d } }

// UniqueUntilDone holds the key while the job is pending or running: it is
// released once the job is acked, dead-lettered, cancelled or purged.
func UniqueUntilDone() UniqueScope { return func(o *Outgoing) { o.UniqueUntilDone = true } }

// Delay hides the message for d.
func Delay(d time.Duration) SendOption { return func(o *Outgoing) { o.Delay = d } }

// RunAt hides the message until t.
func RunAt(t time.Time) SendOption { return func(o *Outgoing) { o.RunAt = t } }

// Priority sets the priority (0-9, higher first).
func Priority(p uint32) SendOption { return func(o *Outgoing) { o.Priority = p } }

// Attributes adds attributes (merged with earlier ones).
func Attributes(a map[string]string) SendOption {
	return func(o *Outgoing) {
		if o.Attributes == nil {
			o.Attributes = make(map[string]string, len(a))
		}
		maps.Copy(o.Attributes, a)
	}
}

// Type sets the message type, which the worker dispatches on.
func Type(t string) SendOption { return func(o *Outgoing) { o.Type = t } }

// MaxAttempts dead-letters the message at n receives instead of at the
// queue's max receive count (1-1000, MaxReceives).
func MaxAttempts(n uint32) SendOption { return func(o *Outgoing) { o.MaxReceives = n } }

// Backoff sets the message's own nack backoff: full jitter up to base
// doubled per receive, capped at max (0: the queue's cap, or base if
// higher).
func Backoff(base, max time.Duration) SendOption {
	return func(o *Outgoing) { o.BackoffBase, o.BackoffMax = base, max }
}

// SendResult is the outcome of one send.
type SendResult struct {
	ID           string
	Deduplicated bool   // an earlier message with the dedup key was returned
	Deliveries   uint32 // a send to a topic: the subscriptions that received a copy
	Err          error  // SendBatch only: this item's error
}

func (o *Outgoing) request(queue string) (*raftqv1.SendRequest, error) {
	if o.Delay < 0 || o.Delay > MaxDelay {
		return nil, invalid(fmt.Sprintf("delay %v outside 0-%v", o.Delay, MaxDelay))
	}
	if o.BackoffBase < 0 || o.BackoffMax < 0 {
		return nil, invalid(fmt.Sprintf("backoff %v..%v is negative", o.BackoffBase, o.BackoffMax))
	}
	r := &raftqv1.SendRequest{
		Queue:           queue,
		Body:            o.Body,
		Attributes:      o.Attributes,
		Type:            o.Type,
		GroupId:         o.Group,
		DedupKey:        o.DedupKey,
		Priority:        o.Priority,
		DelayMs:         o.Delay.Milliseconds(),
		UniqueForMs:     o.UniqueFor.Milliseconds(),
		UniqueUntilDone: o.UniqueUntilDone,
		// The server answers bad values with InvalidArgument.
		MaxReceiveCount: o.MaxReceives,
		BackoffBaseMs:   o.BackoffBase.Milliseconds(),
		BackoffMaxMs:    o.BackoffMax.Milliseconds(),
	}
	if !o.RunAt.IsZero() {
		r.RunAtMs = o.RunAt.UnixMilli()
	}
	return r, nil
}

// checkUnique refuses a unique job without a key of its own; called before
// an automatic dedup key could stand in for one.
func (o *Outgoing) checkUnique() error {
	if o.UniqueFor < 0 || o.UniqueFor > MaxRetention {
		return invalid(fmt.Sprintf("unique-for %v outside 0-%v", o.UniqueFor, MaxRetention))
	}
	if (o.UniqueFor > 0 || o.UniqueUntilDone) && o.DedupKey == "" {
		return invalid("a unique job needs a key: client.Unique(key, ...)")
	}
	return nil
}

// autoKey makes a dedup key that no other send will carry.
func autoKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return "auto-" + hex.EncodeToString(b[:])
}

// autoKeyOn makes a fresh dedup key that the slot table t places on shard
// (of n), so one batch of keyless messages stays one shard's single log
// entry instead of being split across all shards. About n hash probes per
// key when the slots are balanced; bounded, in case the table gives the
// shard no slot (a key elsewhere then only costs the batch a split).
func autoKeyOn(queue string, shard uint32, t wire.SlotTable, n uint32) string {
	base := autoKey() + "-"
	k := base + "0"
	if n == 0 || !t.Valid() {
		return k
	}
	for i := 1; i <= 64*int(n); i++ {
		if s, _ := t.ShardForMessage(queue, "", k); s == shard {
			return k
		}
		k = base + strconv.Itoa(i)
	}
	return k
}

// shardOf routes a message whose shard is fixed — by its group (order) or,
// ungrouped, by its dedup key (dedup state is per shard) — to that shard's
// leader, by the slot table of the client's shard map; other messages go
// to any node, which picks a shard.
func (c *Client) shardOf(queue, group, dedupKey string) int {
	return c.smap.Load().shardOf(queue, group, dedupKey)
}

// shardOf is Client.shardOf by m's table.
func (m *shardMap) shardOf(queue, group, dedupKey string) int {
	if m.count == 0 || !m.table.Valid() {
		return anyShard
	}
	if s, ok := m.table.ShardForMessage(queue, group, dedupKey); ok && s < m.count {
		return int(s)
	}
	return anyShard
}

// Send enqueues one message. It returns after a quorum of the shard has the
// message on disk. It is retried only with a dedup key (see the package
// comment), so a retry cannot enqueue the message twice within the dedup
// window.
func (c *Client) Send(ctx context.Context, queue string, body []byte, opts ...SendOption) (res SendResult, err error) {
	if t := c.cfg.tracing; t != nil {
		var span trace.Span
		ctx, span = t.startSend(ctx, queue, 1)
		defer func() {
			if err == nil {
				span.SetAttributes(attribute.String("messaging.message.id", res.ID))
			}
			endSpan(span, err)
		}()
	}
	ps, err := c.prepareSend(ctx, queue, body, opts)
	if err != nil {
		return SendResult{}, fmt.Errorf("send to %q: %w", queue, err)
	}
	if ps.coalesce {
		res, err = c.sendCoalesced(ctx, ps.key, ps.req)
	} else {
		res, err = c.sendAlone(ctx, ps)
	}
	if err != nil {
		return SendResult{}, fmt.Errorf("send to %q: %w", queue, err)
	}
	return res, nil
}

// preparedSend is one message ready to leave: its request and where it goes.
type preparedSend struct {
	req      *raftqv1.SendRequest
	spec     callSpec
	coalesce bool
	key      coalesceKey
}

// prepareSend applies the options, gives the message its automatic dedup
// key and picks its shard. A message bound for a known shard leaves with the
// other sends to that shard, unless the caller attached gRPC metadata, which
// only a call of its own can carry.
func (c *Client) prepareSend(ctx context.Context, queue string, body []byte, opts []SendOption) (preparedSend, error) {
	if err := c.admit(); err != nil {
		return preparedSend{}, err
	}
	o := Outgoing{Body: body}
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.checkUnique(); err != nil {
		return preparedSend{}, err
	}
	if o.DedupKey == "" && c.cfg.autoDedup {
		o.DedupKey = autoKey()
	}
	if t := c.cfg.tracing; t != nil {
		t.injectOutgoing(ctx, &o)
	}
	req, err := o.request(queue)
	if err != nil {
		return preparedSend{}, err
	}
	c.loadMap(ctx)
	// Admitted above: its call is made even if a Drain begins meanwhile.
	shard := c.shardOf(queue, o.Group, o.DedupKey)
	ps := preparedSend{req: req, spec: callSpec{shard: shard, safe: o.DedupKey != "", admitted: true, sendTo: holdable(ctx, queue, shard)}}
	if ps.spec.shard != anyShard && c.cfg.coalesceMax > 1 && !hasOutgoingMetadata(ctx) {
		req.Queue = "" // the batch names it
		ps.coalesce = true
		ps.key = coalesceKey{queue: queue, shard: ps.spec.shard, safe: ps.spec.safe}
	}
	return ps, nil
}

// sendAlone sends one message in a Send call of its own.
func (c *Client) sendAlone(ctx context.Context, ps preparedSend) (SendResult, error) {
	var resp *raftqv1.SendResponse
	start := time.Now()
	err := c.invoke(ctx, ps.spec, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) (err error) {
		resp, err = raftqv1.NewMessagesClient(cc).Send(withQueue(ctx, ps.req.GetQueue()), ps.req, co...)
		return err
	})
	if err != nil {
		return SendResult{}, err
	}
	c.sendAnswered(holdKey{queue: ps.spec.sendTo, shard: ps.spec.shard}, start, nil)
	return SendResult{ID: resp.GetMessageId(), Deduplicated: resp.GetDeduplicated(), Deliveries: resp.GetDeliveries()}, nil
}

// SendBatch enqueues many messages in one call. The returned slice has one
// result per item, in order; an item's failure is in its Err. The error is
// nil only if every item was enqueued: a call that failed as a whole
// returns its error and no results; items that failed alone make it a
// *BatchError (with the results, so the items that went through are
// known). Items without a dedup key get one when AutoDedup is on; the
// batch is retried only when every item has a key.
func (c *Client) SendBatch(ctx context.Context, queue string, items []Outgoing) (_ []SendResult, err error) {
	if len(items) == 0 {
		return nil, nil
	}
	if err := c.admit(); err != nil {
		return nil, fmt.Errorf("send batch to %q: %w", queue, err)
	}
	if t := c.cfg.tracing; t != nil {
		var span trace.Span
		ctx, span = t.startSend(ctx, queue, len(items))
		defer func() { endSpan(span, err) }()
	}
	req := &raftqv1.SendBatchRequest{Queue: queue, Messages: make([]*raftqv1.SendRequest, len(items))}
	c.loadMap(ctx)
	m := c.smap.Load() // one map for the whole batch: its keys and its shard agree
	n := m.count
	// Keyless ungrouped messages get auto keys placing them with the first
	// message whose shard is fixed, or on a round-robin shard: a batch that
	// fits one shard goes straight to its leader as one request.
	target := uint32(c.rr.Add(1) % uint64(max(n, 1)))
	for _, o := range items {
		if s := m.shardOf(queue, o.Group, o.DedupKey); s != anyShard {
			target = uint32(s)
			break
		}
	}
	safe := true
	shard := anyShard
	for i := range items {
		o := items[i] // a copy: the caller's slice is not modified
		if err := o.checkUnique(); err != nil {
			return nil, fmt.Errorf("send batch to %q: item %d: %w", queue, i, err)
		}
		if o.DedupKey == "" && c.cfg.autoDedup {
			if o.Group == "" && n > 0 {
				o.DedupKey = autoKeyOn(queue, target, m.table, n)
			} else {
				o.DedupKey = autoKey()
			}
		}
		safe = safe && o.DedupKey != ""
		if t := c.cfg.tracing; t != nil {
			t.injectOutgoing(ctx, &o)
		}
		r, err := o.request("")
		if err != nil {
			return nil, fmt.Errorf("send batch to %q: item %d: %w", queue, i, err)
		}
		req.Messages[i] = r
		if s := m.shardOf(queue, o.Group, o.DedupKey); i == 0 {
			shard = s
		} else if s != shard {
			shard = anyShard
		}
	}
	if size := proto.Size(req); size > MaxRequestBytes {
		return nil, fmt.Errorf("send batch to %q: %w", queue, invalid(fmt.Sprintf(
			"the batch of %d messages is %.1f MiB encoded; a request is at most %d MiB: split it", len(items), float64(size)/(1<<20), MaxRequestBytes>>20)))
	}
	var resp *raftqv1.SendBatchResponse
	start := time.Now()
	err = c.invoke(ctx, callSpec{shard: shard, safe: safe, sendTo: holdable(ctx, queue, shard)}, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) (err error) {
		resp, err = raftqv1.NewMessagesClient(cc).SendBatch(withQueue(ctx, queue), req, co...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("send batch to %q: %w", queue, err)
	}
	if len(resp.GetResults()) != len(items) {
		return nil, fmt.Errorf("send batch to %q: server returned %d results for %d messages", queue, len(resp.GetResults()), len(items))
	}
	out := make([]SendResult, len(items))
	errs := make([]error, len(items))
	for i, r := range resp.GetResults() {
		errs[i] = sendItemError(r)
		out[i] = SendResult{ID: r.GetMessageId(), Deduplicated: r.GetDeduplicated(), Deliveries: r.GetDeliveries(), Err: errs[i]}
	}
	c.sendAnswered(holdKey{queue: holdable(ctx, queue, shard), shard: shard}, start, errs)
	if err := batchError(errs); err != nil {
		return out, fmt.Errorf("send batch to %q: %w", queue, err)
	}
	return out, nil
}

// hasOutgoingMetadata reports whether ctx carries gRPC metadata for the
// call (auth, tenant, tracing): such a send is not coalesced with others,
// which would send it under their metadata.
func hasOutgoingMetadata(ctx context.Context) bool {
	md, ok := metadata.FromOutgoingContext(ctx)
	return ok && md.Len() > 0
}

// queueHeader names a send's queue in its metadata (server/admission.go),
// so a node refusing the queue's sends for a while answers before reading
// the body.
const queueHeader = "raftq-queue"

func withQueue(ctx context.Context, queue string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, queueHeader, queue)
}
