package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Send coalescing: concurrent Send calls bound for the same shard leave as
// one SendBatch call, the way a Kafka producer or a NATS connection batches
// what is in flight. There is no linger timer: a lone Send goes out at once;
// sends that arrive while a shard's calls are in flight wait for a free
// call slot and leave together. Every Send still returns only after the
// server has committed its message, with its own id or error.
const (
	// defaultCoalesceMax caps messages per coalesced call.
	defaultCoalesceMax = 256
	// maxCoalesceMax is the server's SendBatch limit (fsm.MaxEnqueueBatch).
	maxCoalesceMax = 1000
	// coalesceBytes caps the bodies of one coalesced call, well inside
	// gRPC's default 4 MiB message limit and the proposer's entry size.
	coalesceBytes = 1 << 20
	// A stream may have this many coalesced calls in flight: enough to
	// keep a leader's pipeline full, few enough that waiting sends form
	// large batches. On one shard 4 (1,024 messages of 1 KiB in flight)
	// keep the leader's rounds below the proposer's 1 MiB, and 8 fill them
	// (docs/benchmarks.md, "What bounds the ceiling"). With several shards
	// 8 let producers outrun consumers: the proposer's fast lane keeps
	// receives ahead of sends within a shard, but a receive may sweep
	// several shards.
	coalesceCallsOneShard = 8
	coalesceCallsPerShard = 4
)

// streamCalls is how many calls one stream may have in flight, by the
// cluster's shard count (see coalesceCallsOneShard).
func (c *Client) streamCalls() int {
	if c.smap.Load().count <= 1 {
		return coalesceCallsOneShard
	}
	return coalesceCallsPerShard
}

// coalesceKey names one stream of sends: a queue's shard, and whether its
// messages carry dedup keys (only then may the batch be retried).
type coalesceKey struct {
	queue string
	shard int
	safe  bool
}

// sendStream holds the sends waiting for one coalesceKey.
type sendStream struct {
	c   *Client
	key coalesceKey

	mu      sync.Mutex
	pending []*pendingSend
	running int // calls in flight
}

type pendingSend struct {
	ctx  context.Context
	req  *raftqv1.SendRequest
	size int
	// state moves once, under sendStream.mu: waiting -> taken | cancelled.
	state   int
	done    chan sendOutcome // buffered 1
	lastErr error            // send's retries only
	// unknown: an earlier attempt left the item's outcome unknown, so no
	// later refusal settles it (send's retries only).
	unknown bool
	// release ends the send's count in Client.inflight; called once, when
	// its outcome is delivered or its sender withdraws it.
	release func()
}

// failed is err as p's outcome: marked ErrOutcomeUnknown when an earlier
// attempt left p unknown. A node refuses a send (a quota, a full send
// queue) before it looks up the dedup key, so its refusal says nothing of
// an earlier attempt that may have been applied.
func (p *pendingSend) failed(err error) error {
	if p.unknown && !errors.Is(err, ErrOutcomeUnknown) {
		return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	}
	return err
}

// finish delivers p's outcome; it is called once per send.
func (p *pendingSend) finish(o sendOutcome) {
	p.done <- o
	p.release()
}

const (
	sendWaiting = iota
	sendTaken
	sendCancelled
)

type sendOutcome struct {
	res SendResult
	err error
}

// stream returns the coalescing stream for key, creating it on first use.
func (c *Client) stream(key coalesceKey) *sendStream {
	if s, ok := c.streams.Load(key); ok {
		return s.(*sendStream)
	}
	s, _ := c.streams.LoadOrStore(key, &sendStream{c: c, key: key})
	return s.(*sendStream)
}

// sendCoalesced queues req on its shard's stream and waits for its result.
// If ctx ends before the message left, nothing was sent (ErrNotSent);
// after, the outcome is unknown, as for any call cut short.
func (c *Client) sendCoalesced(ctx context.Context, key coalesceKey, req *raftqv1.SendRequest) (SendResult, error) {
	p, s := c.queueCoalesced(ctx, key, req)
	select {
	case o := <-p.done:
		return o.res, o.err
	case <-ctx.Done():
		select {
		case o := <-p.done: // answered as the context ended: keep the answer
			return o.res, o.err
		default:
		}
		if s.cancel(p) {
			return SendResult{}, notSent(ctx)
		}
		return SendResult{}, fmt.Errorf("%w: %w", ErrOutcomeUnknown, fromStatus(status.FromContextError(ctx.Err()).Err()))
	}
}

// queueCoalesced puts req on its shard's stream. At most one outcome
// reaches p.done: the call's, or ErrNotSent if ctx ends before the message
// is taken into a call. Only a sync sender that withdraws its message
// itself (cancel) gets none there, and it does not read p.done again.
func (c *Client) queueCoalesced(ctx context.Context, key coalesceKey, req *raftqv1.SendRequest) (*pendingSend, *sendStream) {
	c.inflight.add()
	p := &pendingSend{ctx: ctx, req: req, size: len(req.GetBody()), done: make(chan sendOutcome, 1), release: c.inflight.done}
	s := c.stream(key)
	s.add(p)
	return p, s
}

func (s *sendStream) add(p *pendingSend) {
	s.mu.Lock()
	s.pending = append(s.pending, p)
	start := s.running < s.c.streamCalls()
	if start {
		s.running++
	}
	s.mu.Unlock()
	if start {
		go s.run()
	}
}

// cancel withdraws p if it has not been taken into a call.
func (s *sendStream) cancel(p *pendingSend) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch p.state {
	case sendWaiting:
		p.state = sendCancelled
		p.release() // no outcome will be delivered
		return true
	case sendCancelled: // take() dropped it: never sent
		return true
	}
	return false
}

// run sends batches until nothing waits, then gives its call slot back.
func (s *sendStream) run() {
	for {
		batch := s.take()
		if batch == nil {
			return
		}
		s.send(batch)
	}
}

// take removes the next batch from the queue; nil (and the slot released)
// when nothing waits.
func (s *sendStream) take() []*pendingSend {
	s.mu.Lock()
	defer s.mu.Unlock()
	var batch []*pendingSend
	bytes, i := 0, 0
	for ; i < len(s.pending) && len(batch) < s.c.cfg.coalesceMax; i++ {
		p := s.pending[i]
		if p.state == sendWaiting && p.ctx.Err() != nil {
			// Its sender is returning; do not send it. An asynchronous
			// sender is not watching its context, so it learns here.
			p.state = sendCancelled
			p.finish(sendOutcome{err: notSent(p.ctx)})
		}
		if p.state != sendWaiting {
			continue
		}
		if len(batch) > 0 && bytes+p.size > coalesceBytes {
			break
		}
		p.state = sendTaken
		batch = append(batch, p)
		bytes += p.size
	}
	rest := copy(s.pending, s.pending[i:])
	clear(s.pending[rest:])
	s.pending = s.pending[:rest]
	if len(batch) == 0 {
		s.running--
	}
	return batch
}

// send makes SendBatch calls for batch and answers every sender. A call
// that fails as a whole is retried by invoke. Items the server could not
// commit (a shard without a leader, a split batch cut by a leadership
// change: UNAVAILABLE per item) are sent again, when every message carries
// a dedup key, with backoff and within the retry budget, like a single
// Send would be. The calls are not bound to any one sender's context: they
// live until the latest sender deadline (or the retry budget, if a sender
// has none).
func (s *sendStream) send(batch []*pendingSend) {
	ctx, cancel := batchContext(batch)
	defer cancel()
	retry := s.c.cfg.retry
	hinted := map[string]bool{}
	// hold: no earlier attempt of these items got an answer that leaves
	// them unknown, so a hold may answer for the node (hold.go).
	hold := true
	for attempt := 1; len(batch) > 0; attempt++ {
		results, by, trailer, err := s.call(ctx, batch, hold)
		if err != nil {
			for _, p := range batch {
				perr := err
				if attempt > 1 && errors.Is(err, ErrNotSent) {
					// This call never left, but an earlier one carried the
					// item and got an answer that did not settle it.
					perr = fmt.Errorf("%w: %w (earlier attempt: %v)", ErrOutcomeUnknown, err, p.lastErr)
				}
				p.finish(sendOutcome{err: p.failed(perr)})
			}
			return
		}
		var again []*pendingSend
		var wait time.Duration // the longest retry time of a refused item
		onlyRefused := true
		for i, p := range batch {
			r := results[i]
			ierr := sendItemError(r)
			refusedFor := time.Duration(r.GetRetryAfterMs()) * time.Millisecond
			switch {
			case ierr == nil:
				p.finish(sendOutcome{res: SendResult{ID: r.GetMessageId(), Deduplicated: r.GetDeduplicated(), Deliveries: r.GetDeliveries()}})
			case codes.Code(r.GetCode()) == codes.ResourceExhausted && refusedFor > 0 && attempt < retry.MaxAttempts && p.ctx.Err() == nil:
				// Refused before anything was written, with a time to
				// come back (a quota, a full send queue): sent again then,
				// dedup key or not, as a lone Send's RetryInfo would be.
				again = append(again, p)
				p.lastErr = ierr
				wait = max(wait, refusedFor)
			case s.key.safe && attempt < retry.MaxAttempts && p.ctx.Err() == nil && retryableItem(codes.Code(r.GetCode())):
				again = append(again, p)
				p.lastErr = ierr
				p.unknown = true
				onlyRefused = false
			case s.key.safe && attempt >= retry.MaxAttempts && retryableItem(codes.Code(r.GetCode())):
				p.finish(sendOutcome{err: p.failed(fmt.Errorf("%w (gave up after %d attempts)", ierr, attempt))})
			default:
				p.finish(sendOutcome{err: p.failed(ierr)})
			}
		}
		if len(again) > 0 {
			// The node that could not commit them named a leader: go there,
			// at once the first time. Else pass it over for a while.
			hint := itemHint(trailer)
			sleep := retry.backoff(attempt)
			switch {
			case onlyRefused:
				// The node answered; it asked for time, not another node.
				sleep = wait
			case hint != "" && hint != by:
				s.c.noteLeader(s.key.shard, hint)
				if !hinted[hint] {
					sleep = 0
				}
				hinted[hint] = true
			default:
				s.c.distrust(by)
				if err := s.c.refresh(ctx, false); err != nil {
					s.c.cfg.logger.Debug("raftq shard map refresh failed", "err", err)
				}
			}
			sleep = max(sleep, wait)
			if serr := sleepCtx(ctx, sleep); serr != nil {
				for _, p := range again {
					p.finish(sendOutcome{err: p.failed(fmt.Errorf("%w (retry stopped: %v)", p.lastErr, serr))})
				}
				return
			}
			again = dropEnded(again)
		}
		batch = again
		hold = hold && onlyRefused
	}
}

// dropEnded answers and removes the items whose sender's context has ended.
// Such a sender has returned (or, async, will be told) that the outcome is
// unknown, and may send the next message
// of its group: resending its item after that could commit it second. A
// lone Send retries on its caller's context and stops the same way.
func dropEnded(items []*pendingSend) []*pendingSend {
	kept := items[:0]
	for _, p := range items {
		if err := p.ctx.Err(); err != nil {
			p.finish(sendOutcome{err: p.failed(fmt.Errorf("%w (retry stopped: %v)", p.lastErr, err))})
			continue
		}
		kept = append(kept, p)
	}
	return kept
}

// call makes one SendBatch call (retried by invoke as a whole) and returns
// one result per message, with the node that answered and its trailer.
func (s *sendStream) call(ctx context.Context, batch []*pendingSend, hold bool) (_ []*raftqv1.SendResult, by string, trailer metadata.MD, _ error) {
	req := &raftqv1.SendBatchRequest{Queue: s.key.queue, Messages: make([]*raftqv1.SendRequest, len(batch))}
	for i, p := range batch {
		req.Messages[i] = p.req
	}
	var resp *raftqv1.SendBatchResponse
	start := time.Now()
	spec := callSpec{shard: s.key.shard, safe: s.key.safe, answered: func(addr string, md metadata.MD) { by, trailer = addr, md }, admitted: true}
	if hold {
		spec.sendTo = s.key.queue
	}
	err := s.c.invoke(ctx, spec, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) (err error) {
		resp, err = raftqv1.NewMessagesClient(cc).SendBatch(withQueue(ctx, req.GetQueue()), req, co...)
		return err
	})
	if err == nil && len(resp.GetResults()) != len(batch) {
		err = fmt.Errorf("server returned %d results for %d messages", len(resp.GetResults()), len(batch))
	}
	if err == nil {
		var errs []error // nil when the first item was taken
		if codes.Code(resp.GetResults()[0].GetCode()) != codes.OK {
			errs = make([]error, len(batch))
			for i, r := range resp.GetResults() {
				errs[i] = sendItemError(r)
			}
		}
		s.c.sendAnswered(holdKey{queue: s.key.queue, shard: s.key.shard}, start, errs)
	}
	return resp.GetResults(), by, trailer, err
}

// itemHint is the leader a node named for the items of a call it could
// not commit: a refusal's leader (LeaderTrailer) or an outcome-unknown
// hint (LeaderHintTrailer), both set on the call's trailer. Items are
// retried only when they carry dedup keys, so either may be followed.
func itemHint(trailer metadata.MD) string {
	if _, addr := refusal(trailer); addr != "" {
		return addr
	}
	return leaderHint(trailer)
}

// notSent is the answer for a message withdrawn before it left.
func notSent(ctx context.Context) error {
	return fmt.Errorf("%w: %w", ErrNotSent, fromStatus(status.FromContextError(ctx.Err()).Err()))
}

// retryableItem reports whether an item's code leaves it uncommitted or
// unknown (never a definite refusal such as an invalid message).
func retryableItem(c codes.Code) bool {
	switch c {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.Internal, codes.Unknown:
		return true
	}
	return false
}

// batchContext lasts until the latest deadline among the senders, so no
// sender's call is cut shorter than it asked; without any deadline it is
// bounded only by the retry policy.
func batchContext(batch []*pendingSend) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, p := range batch {
		dl, ok := p.ctx.Deadline()
		if !ok {
			return context.WithCancel(context.Background())
		}
		if dl.After(latest) {
			latest = dl
		}
	}
	return context.WithDeadline(context.Background(), latest)
}

// errCoalesceOff is returned by WithSendCoalescing for a negative size.
var errCoalesceOff = errors.New("max messages per coalesced call must be 0 (off) or more")
