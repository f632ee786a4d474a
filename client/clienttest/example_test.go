package clienttest_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/client/clienttest"
)

// In a test, clienttest.NewServer(t) starts the fake and stops it when the
// test ends; Start is the same outside a test.
func ExampleServer_Fail() {
	srv, err := clienttest.Start()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Stop()
	ctx := context.Background()
	c, err := client.Dial(ctx, []string{srv.Addr}, client.WithRetry(client.RetryPolicy{MaxAttempts: 2, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := c.CreateQueue(ctx, "jobs", client.QueueOptions{}); err != nil {
		log.Fatal(err)
	}

	// The next two calls of Send (as SendBatch, since sends are
	// coalesced) fail as a node that cannot reach its shard's leader does.
	srv.Fail("SendBatch", 2, codes.Unavailable)
	_, err = c.Send(ctx, "jobs", []byte("x"))
	fmt.Println("unavailable:", errors.Is(err, client.ErrUnavailable), "may be in the queue:", errors.Is(err, client.ErrOutcomeUnknown))
	fmt.Println("in the queue:", srv.Count("jobs", clienttest.Ready))

	// A lost answer: the node enqueued it, the client cannot know.
	srv.LoseAnswer("SendBatch", 1)
	_, err = c.Send(ctx, "jobs", []byte("y"))
	fmt.Println("retried and found:", err == nil, "in the queue:", srv.Count("jobs", clienttest.Ready))
	// Output:
	// unavailable: true may be in the queue: true
	// in the queue: 0
	// retried and found: true in the queue: 1
}
