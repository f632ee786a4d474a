package main

import (
	"context"
	"sync"
	"time"

	"github.com/raftq/raftq/client"
)

// floodBatch is one SendBatch call's messages; a producer keeps a fixed
// set of them, one per call it may have outstanding.
type floodBatch struct {
	bodies [][]byte
	items  []client.Outgoing
	seqs   []uint64
}

// produceFlood is one open-loop producer of the overload workload's
// tenant A: at each of its pacer slots it starts a SendBatch call of
// l.sendBatch messages, whatever the calls before it got, with up to
// l.inflight calls outstanding. Blocking sends (produce) would offer only
// what the cluster takes: a flooded leader that queues the sends it takes
// for seconds would hold every producer, and the offered rate would fall
// to the accepted one. Refusals are not waited out either: A offers its
// rate and counts what it is told. When every call is outstanding the
// producer waits for one, so its offered rate falls below the pacer's;
// the report shows the offered rate beside the target.
func (l *load) produceFlood(ctx context.Context, p int) {
	var calls sync.WaitGroup
	defer calls.Wait()
	free := make(chan *floodBatch, l.inflight)
	for range l.inflight {
		free <- &floodBatch{bodies: make([][]byte, l.sendBatch), items: make([]client.Outgoing, l.sendBatch), seqs: make([]uint64, l.sendBatch)}
	}
	for !l.stopSend.Load() && ctx.Err() == nil {
		if err := l.pace.wait(ctx, l.sendBatch); err != nil {
			return
		}
		var b *floodBatch
		select {
		case b = <-free:
		default:
			l.floodStalls.Add(1)
			select {
			case b = <-free:
			case <-ctx.Done():
				return
			}
		}
		first := l.led.nextN(p, l.sendBatch)
		now := time.Now()
		for i := range b.items {
			b.seqs[i] = first + uint64(i)
			b.bodies[i] = encodeInto(b.bodies[i], header{Producer: uint32(p), Seq: b.seqs[i], Sent: now}, l.fill)
			b.items[i] = client.Outgoing{Body: b.bodies[i]}
		}
		calls.Go(func() {
			ok, answered := l.send(ctx, p, b.items, b.seqs)
			if ok > 0 && l.measuring.Load() {
				l.enqueue.recordN(time.Since(now), ok)
			}
			if !answered {
				// A body may still be in a call the client gave up on.
				clear(b.bodies)
			}
			free <- b // cannot block: one place per batch
		})
	}
}
