package main

import (
	"context"
	"sync"
	"time"

	"github.com/raftq/raftq/client"
)

// asyncSend is one SendAsync a producer has outstanding.
type asyncSend struct {
	p    *client.PendingSend
	seq  uint64
	at   time.Time
	body []byte
}

// produceAsync is one producer keeping up to l.inflight sends outstanding,
// the way natsbench drives NATS with PublishAsync: one goroutine starts
// sends, a second collects their answers oldest first (an answer that
// arrives ahead of an older one waits for it), and the channel between
// them carries at most l.inflight sends (slots is the window).
//
// The collector waits on the oldest send as soon as it is out, so an
// enqueue latency ends when the answer is in. (Collecting only when the
// window is full would measure how long a send sat in the window: with a
// --rate cap, the window over the producer's share of the rate, whatever
// the cluster did.)
func (l *load) produceAsync(ctx context.Context, p int) {
	slots := make(chan struct{}, l.inflight)
	window := make(chan asyncSend, l.inflight)
	// Bodies of answered sends go back for reuse: the client holds a body
	// until its send is answered.
	spares := make(chan []byte, l.inflight)
	var wg sync.WaitGroup
	wg.Go(func() {
		for s := range window {
			if l.collect(ctx, p, s) {
				spares <- s.body // cannot block: one per slot
			}
			<-slots
		}
	})
	defer wg.Wait()
	defer close(window)
	for !l.stopSend.Load() && ctx.Err() == nil {
		if !l.waitBacklog(ctx) {
			return
		}
		if l.allowance(ctx, 1) == 0 {
			return
		}
		if err := l.pace.wait(ctx, 1); err != nil {
			return
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		var spare []byte
		select {
		case spare = <-spares:
		default:
		}
		seq := l.led.next(p)
		l.offered.Add(1)
		now := time.Now()
		body := encodeInto(spare, header{Producer: uint32(p), Seq: seq, Sent: now}, l.fill)
		// Every send started is booked: the collector drains the window
		// after the loop ends, whatever ended it.
		window <- asyncSend{p: l.c.SendAsync(ctx, l.queue, body), seq: seq, at: now, body: body}
	}
}

// collect waits for one async send's answer and books it; true when the
// send was answered (its body is free again).
func (l *load) collect(ctx context.Context, p int, s asyncSend) bool {
	res, err := s.p.Wait(ctx)
	if err != nil {
		l.led.book(p, []uint64{s.seq}, []sendState{l.failed(err, 1).ledgerState()})
		if ctx.Err() == nil && !l.stopSend.Load() {
			// Back off a little so a refusing cluster is not hammered (not
			// while collecting what is left at the end). The window stays
			// full meanwhile, which holds the sender too.
			time.Sleep(20 * time.Millisecond)
		}
		return false
	}
	l.led.sent(p, s.seq, true)
	l.checkDeliveries(res)
	l.enqueued.Add(1)
	if l.measuring.Load() {
		l.enqueue.recordN(time.Since(s.at), 1)
	}
	return true
}
