package main

import (
	"context"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/client/clienttest"
)

// Under a rate cap the async window never fills. An answered send must be
// booked (and its enqueue latency end) when its answer is in, not once the
// window has filled: at 2 sends/s a window of 64 fills only after 32 s,
// so the first send booked while fewer than 64 were started shows the
// collector waits on each send as soon as it is out.
func TestAsyncEnqueueLatencyEndsAtTheAnswer(t *testing.T) {
	s := clienttest.NewServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, []string{s.Addr})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer c.Close()
	if _, err := c.CreateQueue(ctx, "q", client.QueueOptions{}); err != nil {
		t.Fatalf("CreateQueue: %v", err)
	}
	const window = 64
	l := newLoad(c, "q", loadSpec{producers: 1, inflight: window, asyncSend: true, rate: 2, size: 16})
	l.measuring.Store(true)
	l.startProducers(ctx)
	defer l.stopProducers()
	started := func() uint64 {
		l.led.mu.Lock()
		defer l.led.mu.Unlock()
		return l.led.producers[0].next
	}
	for l.enqueued.Load() == 0 {
		if ctx.Err() != nil {
			t.Fatalf("no send booked as answered after %d started", started())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := started(); n >= window {
		t.Fatalf("the first answer was booked once %d sends were started: the window's residence, not the answer", n)
	}
	if got := l.enqueue.summary().Count; got == 0 {
		t.Fatal("the answered send's enqueue latency was not recorded")
	}
}
