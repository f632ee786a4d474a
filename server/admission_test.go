package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/router"
)

// A queue refused with a retry time is refused at the tap, with the same
// words and the time left, until then; other queues and other methods
// pass; a batch only part refused is not remembered.
func TestTapRefusesWhatWasJustRefused(t *testing.T) {
	node := &startingNode{}
	node.count.Store(1)
	rt := router.New(node, router.Options{Logger: discard()})
	t.Cleanup(func() { _ = rt.Close() })
	s := &Server{router: rt}
	info := func(method, queue string) *tap.Info {
		return &tap.Info{FullMethodName: method, Header: metadata.Pairs(QueueHeader, queue)}
	}
	send := "/raftq.v1.Messages/SendBatch"
	if _, err := s.Tap(context.Background(), info(send, "a/q")); err != nil {
		t.Fatalf("nothing refused yet: %v", err)
	}
	s.noteBatchRefusal("a/q", []*raftqv1.SendResult{
		{Code: int32(codes.ResourceExhausted), Error: "shard 0 is overloaded: x", RetryAfterMs: 300},
		{Code: int32(codes.ResourceExhausted), Error: "shard 0 is overloaded: y", RetryAfterMs: 200},
	})
	_, err := s.Tap(context.Background(), info(send, "a/q"))
	st, _ := status.FromError(err)
	if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "overloaded: y") {
		t.Fatalf("tap after a refused batch: %v", err)
	}
	if ms := retryMs(err); ms <= 0 || ms > 200 {
		t.Fatalf("retry %d ms, want the time left of 200 ms", ms)
	}
	for _, i := range []*tap.Info{info(send, "b/q"), info("/raftq.v1.Messages/Receive", "a/q"), {FullMethodName: send}} {
		if _, err := s.Tap(context.Background(), i); err != nil {
			t.Fatalf("%s on %v: %v", i.FullMethodName, i.Header, err)
		}
	}
	s.noteBatchRefusal("c/q", []*raftqv1.SendResult{{Code: int32(codes.ResourceExhausted), RetryAfterMs: 500}, {MessageId: "0-1"}})
	if _, err := s.Tap(context.Background(), info(send, "c/q")); err != nil {
		t.Fatalf("a batch that was partly taken: %v", err)
	}
	// On two shards a refusal of one shard's says nothing of the queue's
	// other shards, but the node's own guards hold for all.
	node.count.Store(2)
	one := []*raftqv1.SendResult{{Code: int32(codes.ResourceExhausted), Error: "shard 1 is overloaded", RetryAfterMs: 500}}
	s.noteBatchRefusal("e/q", one)
	if _, err := s.Tap(context.Background(), info(send, "e/q")); err != nil {
		t.Fatalf("a shard's refusal on two shards: %v", err)
	}
	one[0].Error = "node n1: memory near its budget (1 GiB live of 2 GiB)"
	s.noteBatchRefusal("e/q", one)
	if _, err := s.Tap(context.Background(), info(send, "e/q")); err == nil {
		t.Fatal("the memory guard's refusal was not remembered")
	}
	// Expired: passes again.
	s.refused.note("d/q", "x", time.Millisecond, time.Now().Add(-time.Second))
	if _, err := s.Tap(context.Background(), info(send, "d/q")); err != nil {
		t.Fatalf("an expired refusal: %v", err)
	}
}
