package main

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/client/clienttest"
)

// fakeLoad dials an in-memory fake node, with opts, and creates queue q.
func fakeLoad(t *testing.T, opts ...client.Option) (*clienttest.Server, *client.Client, context.Context) {
	t.Helper()
	s := clienttest.NewServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	c, err := client.Dial(ctx, []string{s.Addr}, opts...)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.CreateQueue(ctx, "q", client.QueueOptions{}); err != nil {
		t.Fatalf("CreateQueue: %v", err)
	}
	return s, c, ctx
}

// A SendBatch in which one item fails stores the others: they are booked
// acked, one by one, and only the failed item is of unknown outcome.
func TestSendBatchBooksEachItem(t *testing.T) {
	s, c, ctx := fakeLoad(t)
	s.FailItems(1, codes.InvalidArgument)
	l := newLoad(c, "q", loadSpec{producers: 1, inflight: 4, sendBatch: 4, size: 32, total: 8})
	l.startProducers(ctx)
	l.prodWG.Wait()
	if got := l.led.tally(); got.Acked != 7 || got.Unknown != 1 {
		t.Fatalf("tally %+v, want 7 acked and 1 unknown", got)
	}
	if got := l.enqueued.Load(); got != 7 {
		t.Errorf("enqueued %d, want 7", got)
	}
	if got := l.sendErrs.Load(); got != 1 {
		t.Errorf("send errors %d, want 1 (the failed item)", got)
	}
}
