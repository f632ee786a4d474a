package main

import (
	"context"
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

// produceAsync is one producer keeping up to l.inflight sends outstanding
// from a single goroutine, the way natsbench drives NATS with
// PublishAsync: it collects the oldest send once the window is full, so an
// enqueue latency is the time until the producer saw the answer, oldest
// first (an answer that arrives ahead of an older one waits for it).
func (l *load) produceAsync(ctx context.Context, p int) {
	ring := make([]asyncSend, l.inflight) // ring[first:first+n], oldest first
	first, n := 0, 0
	// spare is the body of the last send collected, for the next send to
	// reuse: that send takes the slot just freed.
	var spare []byte
	collectOldest := func() {
		s := ring[first]
		ring[first] = asyncSend{}
		first, n = (first+1)%len(ring), n-1
		_, err := s.p.Wait(ctx)
		l.led.sent(p, s.seq, err == nil)
		spare = nil
		if err != nil {
			l.fail(&l.sendErrs, err)
			if ctx.Err() == nil && !l.stopSend.Load() {
				// Back off a little so a refusing cluster is not hammered
				// (not while collecting what is left at the end).
				time.Sleep(20 * time.Millisecond)
			}
			return
		}
		l.enqueued.Add(1)
		if l.measuring.Load() {
			l.enqueue.recordN(time.Since(s.at), 1)
		}
		// Answered: the client holds the body no longer.
		spare = s.body
	}
	for !l.stopSend.Load() && ctx.Err() == nil {
		if n == len(ring) {
			collectOldest()
		}
		if l.take(1) == 0 {
			break
		}
		if err := l.pace.wait(ctx, 1); err != nil {
			break
		}
		seq := l.led.next(p)
		now := time.Now()
		body := encodeInto(spare, header{Producer: uint32(p), Seq: seq, Sent: now}, l.fill)
		spare = nil
		ring[(first+n)%len(ring)] = asyncSend{p: l.c.SendAsync(ctx, l.queue, body), seq: seq, at: now, body: body}
		n++
	}
	// Every send started is booked, whatever stopped the loop.
	for n > 0 {
		collectOldest()
	}
}
