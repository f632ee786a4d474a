package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftq/raftq/client"
)

// load is one producer/consumer run against one queue: the machinery the
// steady, sweep, backlog and scheduled workloads share.
type load struct {
	c *client.Client
	// cc is the consumers' client: c unless the spec gives its own.
	cc    *client.Client
	queue string
	// recvQueues, when set, are the queues the consumers drain instead of
	// queue: a topic's subscriptions, each drained by consumers of its
	// own; ledger copy i is recvQueues[i]'s.
	recvQueues []string
	// wantDeliveries, when set, is the deliveries every publish must
	// report (SendResult.Deliveries): a topic's subscription count.
	wantDeliveries uint32
	led            *ledger
	fill           []byte
	pace           *pacer
	// consumePace caps what the consumers take, shared like pace; nil: no cap.
	consumePace *pacer
	limit       atomic.Int64 // messages left to send when capped; <0: no cap
	capped      bool
	// refill keeps producers waiting for topUp when the cap is spent,
	// instead of ending: how a workload holds a backlog level.
	refill atomic.Bool
	// resendRefused makes a one-message send refused with a retry time
	// wait that long and send the message again, until it is taken or the
	// producers stop, as a well-behaved client does; its enqueue latency
	// then includes the waits. Otherwise a refusal fails the send.
	resendRefused bool
	// flood runs produceFlood instead of produce: open-loop SendBatch calls.
	flood bool

	producers, perProducer, sendBatch int
	inflight                          int  // sends per producer in flight
	asyncSend                         bool // one goroutine per producer, SendAsync
	consumers, batch                  int
	asyncAck                          bool
	wait                              time.Duration // receive long poll

	measuring atomic.Bool // histograms record only inside the window
	stopSend  atomic.Bool

	enqueue, claim, e2e, ack *latency
	// readyClaim is claim less the server's long-poll wait: from a message
	// being ready for an asking consumer to the consumer holding it.
	// claim is the whole receive call, mostly waiting when consumers keep up.
	readyClaim *latency

	// retryAfter is the wait the cluster asked of each refused send.
	retryAfter *latency

	// offered counts messages handed to a send call (a resend after a
	// refusal is not counted again); outcomes counts what the attempts got.
	offered  atomic.Uint64
	outcomes [numSendClasses]atomic.Uint64
	// held counts the refusals with a retry time that the client made
	// itself, holding a queue a node refused (client.WithSendHold).
	held atomic.Uint64
	// floodStalls counts flood calls that waited for a free call slot: the
	// load generator, not the cluster, held the offered rate back.
	floodStalls atomic.Uint64

	enqueued, processed, redelivered, duplicates atomic.Uint64
	// copyProcessed is processed per receive queue (with recvQueues).
	copyProcessed []atomic.Uint64
	// shortDeliveries counts acknowledged publishes, not deduplicated,
	// whose deliveries were not wantDeliveries.
	shortDeliveries atomic.Uint64
	// maxBacklog, when above 0, holds the producers while more than that
	// many acked copies wait for their consumers: a run then measures the
	// rate the consumers keep up with, not a backlog growing without end.
	maxBacklog int64
	// backlogWaits counts the producers' waits for the backlog to shrink.
	backlogWaits atomic.Uint64
	// Receive calls and those that returned nothing: a receive that comes
	// back empty while a backlog waits shows the gather missing messages.
	recvCalls, recvEmpty        atomic.Uint64
	sendErrs, recvErrs, ackErrs atomic.Uint64
	lastErr                     atomic.Value // string

	prodWG, consWG sync.WaitGroup
}

type loadSpec struct {
	// consumerClient, if set, is the client the consumers use: an
	// application of its own, whose connections a flood of the
	// producers' calls does not clog.
	consumerClient                 *client.Client
	producers, inflight, sendBatch int
	asyncSend                      bool
	consumers, batch               int
	asyncAck                       bool
	size                           int
	seed                           uint64
	rate                           float64
	total                          int // 0: no cap on messages sent
	consumeRate                    float64
	resendRefused, flood           bool
	// recvQueues: see load.recvQueues; consumers is then per queue.
	recvQueues []string
	maxBacklog int64 // see load.maxBacklog
}

func newLoad(c *client.Client, queue string, s loadSpec) *load {
	l := &load{
		c: c, cc: c, queue: queue, led: newFanLedger(s.producers, len(s.recvQueues)), fill: filler(s.seed, s.size),
		pace: newPacer(s.rate), consumePace: newPacer(s.consumeRate), producers: s.producers, perProducer: max(s.inflight/max(s.sendBatch, 1), 1),
		inflight: max(s.inflight, 1), asyncSend: s.asyncSend,
		sendBatch: max(s.sendBatch, 1), consumers: s.consumers, batch: s.batch, asyncAck: s.asyncAck, wait: 2 * time.Second,
		enqueue: newLatency(), claim: newLatency(), e2e: newLatency(), ack: newLatency(), readyClaim: newLatency(),
		retryAfter: newLatency(), resendRefused: s.resendRefused, flood: s.flood, maxBacklog: s.maxBacklog,
	}
	if s.consumerClient != nil {
		l.cc = s.consumerClient
	}
	if len(s.recvQueues) > 0 {
		l.recvQueues = s.recvQueues
		l.wantDeliveries = uint32(len(s.recvQueues))
		l.copyProcessed = make([]atomic.Uint64, len(s.recvQueues))
	}
	l.limit.Store(-1)
	if s.total > 0 {
		l.limit.Store(int64(s.total))
		l.capped = true
	}
	return l
}

func (l *load) fail(counter *atomic.Uint64, err error) {
	counter.Add(1)
	l.lastErr.Store(err.Error())
}

// take reserves up to n messages of the cap; 0 means the cap is spent.
func (l *load) take(n int) int {
	if !l.capped {
		return n
	}
	for {
		left := l.limit.Load()
		if left <= 0 {
			return 0
		}
		k := min(int64(n), left)
		if l.limit.CompareAndSwap(left, left-k) {
			return int(k)
		}
	}
}

// topUp adds n messages to a capped load's allowance.
func (l *load) topUp(n int) {
	l.limit.Add(int64(n))
}

// backlog is the acked copies (of a plain queue, acked sends) not yet
// acked by a consumer. A copy can be acked before its publish's answer is
// booked, so it can dip below zero for a moment.
func (l *load) backlog() int64 {
	return int64(l.enqueued.Load())*int64(max(len(l.recvQueues), 1)) - int64(l.processed.Load())
}

// waitBacklog holds a producer while the backlog is above maxBacklog,
// until it shrinks or the producers stop; false means stop sending.
func (l *load) waitBacklog(ctx context.Context) bool {
	if l.maxBacklog <= 0 {
		return true
	}
	waited := false
	for l.backlog() > l.maxBacklog {
		if l.stopSend.Load() || ctx.Err() != nil {
			return false
		}
		if !waited {
			l.backlogWaits.Add(1)
			waited = true
		}
		sleep(ctx, 2*time.Millisecond)
	}
	return true
}

// allowance reserves up to n messages of the cap like take; with refill
// set it waits for topUp while the cap is spent. 0 means stop sending.
func (l *load) allowance(ctx context.Context, n int) int {
	for {
		if k := l.take(n); k > 0 || !l.refill.Load() {
			return k
		}
		if l.stopSend.Load() {
			return 0
		}
		sleep(ctx, 5*time.Millisecond)
		if ctx.Err() != nil {
			return 0
		}
	}
}

// startProducers runs perProducer goroutines for each producer, each
// keeping one send call (of sendBatch messages) outstanding, until
// stopProducers or the cap.
func (l *load) startProducers(ctx context.Context) {
	for p := range l.producers {
		if l.flood {
			l.prodWG.Go(func() { l.produceFlood(ctx, p) })
			continue
		}
		if l.asyncSend {
			l.prodWG.Go(func() { l.produceAsync(ctx, p) })
			continue
		}
		for range l.perProducer {
			l.prodWG.Go(func() { l.produce(ctx, p) })
		}
	}
}

func (l *load) produce(ctx context.Context, p int) {
	items := make([]client.Outgoing, 0, l.sendBatch)
	seqs := make([]uint64, 0, l.sendBatch)
	// Bodies are reused once a call has answered for all of them (taken or
	// refused); after a failure without an answer a body may still be in a
	// call the client gave up waiting for, so new ones are made.
	bodies := make([][]byte, l.sendBatch)
	for !l.stopSend.Load() && ctx.Err() == nil {
		if !l.waitBacklog(ctx) {
			return
		}
		n := l.allowance(ctx, l.sendBatch)
		if n == 0 {
			return
		}
		if err := l.pace.wait(ctx, n); err != nil {
			return
		}
		items, seqs = items[:0], seqs[:0]
		now := time.Now()
		for i := range n {
			s := l.led.next(p)
			seqs = append(seqs, s)
			bodies[i] = encodeInto(bodies[i], header{Producer: uint32(p), Seq: s, Sent: now}, l.fill)
			items = append(items, client.Outgoing{Body: bodies[i]})
		}
		ok, answered := l.send(ctx, p, items, seqs)
		if !answered {
			clear(bodies)
		}
		took := time.Since(now)
		if ok > 0 && l.measuring.Load() {
			l.enqueue.recordN(took, ok)
		}
		if ok < n {
			// Back off a little so a refusing cluster is not hammered.
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// send sends one call and books each message in the ledger; it returns
// how many were acknowledged, and whether the call was answered for every
// message (taken or refused), so that no body is still held by the client.
func (l *load) send(ctx context.Context, p int, items []client.Outgoing, seqs []uint64) (ok int, answered bool) {
	l.offered.Add(uint64(len(items)))
	if len(items) == 1 {
		return l.sendOne(ctx, p, items[0].Body, seqs[0])
	}
	res, err := l.c.SendBatch(ctx, l.queue, items)
	// A *client.BatchError comes with every item's result: only some items
	// failed, and the others are stored. Any other error is the call's.
	var be *client.BatchError
	if err != nil && (!errors.As(err, &be) || len(res) != len(items)) {
		c := l.failed(err, len(items))
		states := make([]sendState, len(items))
		for i := range states {
			states[i] = c.ledgerState()
		}
		l.led.book(p, seqs, states)
		return 0, c.definite()
	}
	states := make([]sendState, len(items))
	// A batch's failed items are counted by runs of one class and retry
	// time (a flooded leader refuses a whole batch alike), not one by one:
	// a flood's refusals would otherwise cost the load generator, on the
	// cores it shares with the nodes, a lock and an error string each.
	var run struct {
		err   error
		class sendClass
		after time.Duration
		n     int
	}
	flush := func() {
		if run.n > 0 {
			l.failedAs(run.err, run.class, run.n)
		}
		run.n = 0
	}
	for i, r := range res {
		states[i] = sendAcked
		if r.Err == nil {
			ok++
			l.checkDeliveries(r)
			continue
		}
		c := classifySend(r.Err)
		after, _ := client.RetryAfter(r.Err)
		if run.n > 0 && (c != run.class || after != run.after) {
			flush()
		}
		run.err, run.class, run.after = r.Err, c, after
		run.n++
		states[i] = c.ledgerState()
	}
	flush()
	l.led.book(p, seqs, states)
	l.enqueued.Add(uint64(ok))
	return ok, true
}

// checkDeliveries counts an acknowledged publish that reached other than
// every subscription (a repeat the dedup window suppressed reaches none,
// by design).
func (l *load) checkDeliveries(r client.SendResult) {
	if l.wantDeliveries > 0 && !r.Deduplicated && r.Deliveries != l.wantDeliveries {
		l.shortDeliveries.Add(1)
	}
}

// maxResendWait bounds one wait before a refused send goes again, should a
// node ask for more.
const maxResendWait = 5 * time.Second

// sendOne sends one message, again after each refusal with a retry time
// when resendRefused is set.
func (l *load) sendOne(ctx context.Context, p int, body []byte, seq uint64) (ok int, answered bool) {
	for {
		res, err := l.c.Send(ctx, l.queue, body)
		if err == nil {
			l.checkDeliveries(res)
			l.led.sent(p, seq, true)
			l.enqueued.Add(1)
			return 1, true
		}
		c := l.failed(err, 1)
		if c == classRefused && l.resendRefused && l.waitToResend(ctx, err) {
			continue
		}
		l.led.book(p, []uint64{seq}, []sendState{c.ledgerState()})
		return 0, c.definite()
	}
}

// waitToResend waits the time a refusal asked for and reports whether the
// message should go again: not once the producers are stopping.
func (l *load) waitToResend(ctx context.Context, refusal error) bool {
	if l.stopSend.Load() || ctx.Err() != nil {
		return false
	}
	after, _ := client.RetryAfter(refusal)
	sleep(ctx, min(after, maxResendWait))
	return !l.stopSend.Load() && ctx.Err() == nil
}

// failed counts n messages that one error failed, by class, and returns
// the class.
func (l *load) failed(err error, n int) sendClass {
	c := classifySend(err)
	l.failedAs(err, c, n)
	return c
}

// failedAs is failed for an error already classified.
func (l *load) failedAs(err error, c sendClass, n int) {
	l.outcomes[c].Add(uint64(n))
	l.sendErrs.Add(uint64(n - 1))
	l.fail(&l.sendErrs, err)
	if c == classRefused {
		after, _ := client.RetryAfter(err)
		l.retryAfter.recordN(after, n)
		var ce *client.Error
		if errors.As(err, &ce) && ce.Held {
			l.held.Add(uint64(n))
		}
	}
}

// outcomeCounts is what the load's sends got so far.
func (l *load) outcomeCounts() sendOutcomes {
	return sendOutcomes{
		Accepted:    l.enqueued.Load(),
		Refused:     l.outcomes[classRefused].Load(),
		Held:        l.held.Load(),
		RefusedBare: l.outcomes[classRefusedBare].Load(),
		Timeouts:    l.outcomes[classTimeout].Load(),
		Unavailable: l.outcomes[classUnavailable].Load(),
		Other:       l.outcomes[classOther].Load(),
	}
}

// stopProducers stops new sends and waits for the outstanding ones.
func (l *load) stopProducers() {
	l.stopSend.Store(true)
	l.prodWG.Wait()
}

// startConsumers runs the consumers until ctx ends: receive up to batch,
// book each delivery, ack them all in one call. With recvQueues, each
// queue gets consumers of its own.
func (l *load) startConsumers(ctx context.Context) {
	if len(l.recvQueues) == 0 {
		for i := range l.consumers {
			l.consWG.Go(func() { l.consume(ctx, fmt.Sprintf("bench-%d", i), l.queue, 0) })
		}
		return
	}
	for q, queue := range l.recvQueues {
		for i := range l.consumers {
			l.consWG.Go(func() { l.consume(ctx, fmt.Sprintf("bench-%d-%d", q, i), queue, q) })
		}
	}
}

// asyncAcks bounds the ack calls one consumer keeps outstanding in async
// mode, so a slow cluster slows the consumer instead of piling up acks.
const asyncAcks = 4

// consume drains queue, whose deliveries are ledger copy cp.
func (l *load) consume(ctx context.Context, name, queue string, cp int) {
	var acks sync.WaitGroup
	defer acks.Wait()
	slots := make(chan struct{}, asyncAcks)
	for ctx.Err() == nil {
		start := time.Now()
		rec, err := l.cc.ReceiveTimed(ctx, queue, client.ReceiveOptions{Max: l.batch, Wait: l.wait, Consumer: name})
		if err != nil {
			if ctx.Err() == nil {
				l.fail(&l.recvErrs, err)
				time.Sleep(20 * time.Millisecond)
			}
			continue
		}
		l.recvCalls.Add(1)
		msgs := rec.Messages
		if len(msgs) == 0 {
			l.recvEmpty.Add(1)
			continue
		}
		got := time.Now()
		measuring := l.measuring.Load()
		if measuring {
			l.claim.recordN(got.Sub(start), len(msgs))
			l.readyClaim.recordN(max(got.Sub(start)-rec.Waited, 0), len(msgs))
		}
		receipts := make([]string, 0, len(msgs))
		for _, m := range msgs {
			receipts = append(receipts, m.Receipt)
			if m.ReceiveCount > 1 {
				l.redelivered.Add(1)
			}
			h, err := decode(m.Body)
			if err != nil {
				l.led.foreignDelivery()
				continue
			}
			if !l.led.deliveredCopy(cp, h) {
				l.duplicates.Add(1)
			}
			if measuring {
				l.e2e.record(got.Sub(h.Sent))
			}
		}
		if l.asyncAck {
			slots <- struct{}{}
			acks.Go(func() {
				defer func() { <-slots }()
				l.ackBatch(ctx, receipts, measuring, cp)
			})
		} else {
			l.ackBatch(ctx, receipts, measuring, cp)
		}
		// Paid after the receive, so a capped consumer still takes whole
		// batches and the rate holds over time.
		if err := l.consumePace.wait(ctx, len(msgs)); err != nil {
			return
		}
	}
}

// ackBatch acks one received batch and counts what was acked as processed.
// Acks are not cut short by the end of the run: a lease left behind would
// only come back as a redelivery after the drain.
func (l *load) ackBatch(ctx context.Context, receipts []string, measuring bool, cp int) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	as := time.Now()
	err := l.cc.AckBatch(actx, receipts)
	if measuring {
		l.ack.recordN(time.Since(as), len(receipts))
	}
	ok := len(receipts)
	if err != nil {
		var be *client.BatchError
		if errors.As(err, &be) {
			ok -= be.Failed()
		} else {
			ok = 0
		}
		l.fail(&l.ackErrs, err)
	}
	l.processed.Add(uint64(ok))
	if l.copyProcessed != nil {
		l.copyProcessed[cp].Add(uint64(ok))
	}
}

// drain waits until every acknowledged send was delivered, or the limit.
func (l *load) drain(ctx context.Context, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	deadline := start.Add(limit)
	for l.led.outstanding() > 0 {
		if time.Now().After(deadline) {
			return time.Since(start), fmt.Errorf("drain: %d acked messages (or topic copies) still undelivered after %v", l.led.outstanding(), limit)
		}
		select {
		case <-ctx.Done():
			return time.Since(start), fmt.Errorf("drain: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return time.Since(start), nil
}

// counters is a snapshot for rates over a window.
type counters struct {
	at                  time.Time
	enqueued, processed uint64
	// offered: messages handed to send calls; refused: refusals with a
	// retry time.
	offered, refused uint64
}

func (l *load) snapshot() counters {
	return counters{at: time.Now(), enqueued: l.enqueued.Load(), processed: l.processed.Load(),
		offered: l.offered.Load(), refused: l.outcomes[classRefused].Load()}
}

// resetLatencies empties every latency histogram: a load that runs on
// through two measured windows starts the second one empty.
func (l *load) resetLatencies() {
	for _, h := range []*latency{l.enqueue, l.claim, l.e2e, l.ack, l.readyClaim, l.retryAfter} {
		h.reset()
	}
}

func rate(a, b counters, f func(counters) uint64) float64 {
	d := b.at.Sub(a.at).Seconds()
	if d <= 0 {
		return 0
	}
	return float64(f(b)-f(a)) / d
}

func lastError(l *load) string {
	if s, ok := l.lastErr.Load().(string); ok {
		return s
	}
	return ""
}

// intervalTails formats the p99s booked since the previous progress line
// (empty outside the measured window, where nothing is booked).
func (l *load) intervalTails() string {
	enq, n := l.enqueue.interval()
	claim, _ := l.claim.interval()
	ready, _ := l.readyClaim.interval()
	e2e, _ := l.e2e.interval()
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("  p99 enqueue %.0f ms receive %.0f ms claim once ready %.0f ms e2e %.0f ms", enq, claim, ready, e2e)
}
