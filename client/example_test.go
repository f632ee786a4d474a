package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/client/clienttest"
)

// fakeNode starts clienttest's in-memory node so the examples run on their
// own; a program passes its cluster's addresses to Dial instead
// ("127.0.0.1:7101", "127.0.0.1:7102", "127.0.0.1:7103" for make run).
func fakeNode() (addr string, stop func()) {
	srv, err := clienttest.Start()
	if err != nil {
		log.Fatal(err)
	}
	return srv.Addr, srv.Stop
}

func ExampleClient_Send() {
	addr, stop := fakeNode()
	defer stop()
	ctx := context.Background()
	c, err := client.Dial(ctx, []string{addr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	if _, err := c.CreateQueue(ctx, "emails", client.QueueOptions{MaxReceives: 5}); err != nil {
		log.Fatal(err)
	}
	r, err := c.Send(ctx, "emails", []byte(`{"to":"ada@example.com"}`), client.Type("welcome"))
	if err != nil {
		// errors.Is(err, client.ErrOutcomeUnknown): it may be in the queue.
		log.Fatal(err)
	}
	fmt.Println("sent", r.ID)
	// Output: sent 0-1
}

func ExampleClient_Receive() {
	addr, stop := fakeNode()
	defer stop()
	ctx := context.Background()
	c, err := client.Dial(ctx, []string{addr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := c.CreateQueue(ctx, "emails", client.QueueOptions{}); err != nil {
		log.Fatal(err)
	}
	for _, body := range []string{"first", "second"} {
		if _, err := c.Send(ctx, "emails", []byte(body)); err != nil {
			log.Fatal(err)
		}
	}

	// Up to 10 messages, waiting up to 2 s for one to be ready; it may
	// return fewer, or none.
	ms, err := c.Receive(ctx, "emails", client.ReceiveOptions{Max: 10, Wait: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range ms {
		fmt.Printf("%s: %s (delivery %d)\n", m.ID, m.Body, m.ReceiveCount)
		if string(m.Body) == "second" {
			// Not now: ready again after 30 s, with the reason recorded.
			if err := c.Nack(ctx, m.Receipt, client.NackOptions{Delay: 30 * time.Second, Error: "smtp 451"}); err != nil {
				log.Fatal(err)
			}
			continue
		}
		if err := c.Ack(ctx, m.Receipt); err != nil {
			// errors.Is(err, client.ErrStaleReceipt): the lease was lost
			// and the message will be delivered again.
			log.Fatal(err)
		}
	}
	st, err := c.Stats(ctx, "emails")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("ready %d, delayed %d\n", st.Ready, st.Delayed)
	// Output:
	// 0-1: first (delivery 1)
	// 0-2: second (delivery 1)
	// ready 0, delayed 1
}

func ExampleClient_AckBatch() {
	addr, stop := fakeNode()
	defer stop()
	ctx := context.Background()
	c, err := client.Dial(ctx, []string{addr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := c.CreateQueue(ctx, "jobs", client.QueueOptions{}); err != nil {
		log.Fatal(err)
	}
	if _, err := c.Send(ctx, "jobs", []byte("x")); err != nil {
		log.Fatal(err)
	}
	ms, err := c.Receive(ctx, "jobs", client.ReceiveOptions{Max: 10})
	if err != nil {
		log.Fatal(err)
	}

	// The error is nil only if every receipt was acked.
	err = c.AckBatch(ctx, []string{ms[0].Receipt, "not-a-receipt"})
	var be *client.BatchError
	if errors.As(err, &be) {
		for i, itemErr := range be.Errs {
			fmt.Printf("receipt %d: %v\n", i, itemErr)
		}
	}
	// Output:
	// receipt 0: <nil>
	// receipt 1: malformed receipt handle: "not-a-receipt"
}

func ExampleClient_SendAsync() {
	addr, stop := fakeNode()
	defer stop()
	ctx := context.Background()
	c, err := client.Dial(ctx, []string{addr})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.CreateQueue(ctx, "events", client.QueueOptions{}); err != nil {
		log.Fatal(err)
	}

	// Many sends in flight from one goroutine; they leave together.
	pending := make([]*client.PendingSend, 100)
	for i := range pending {
		pending[i] = c.SendAsync(ctx, "events", fmt.Appendf(nil, "event %d", i))
	}
	// Drain waits for every outcome, then closes the client; Close alone
	// would fail what is still in flight (ErrOutcomeUnknown, ErrNotSent).
	if err := c.Drain(ctx); err != nil {
		log.Fatal(err)
	}
	sent := 0
	for _, p := range pending {
		if _, err := p.Wait(ctx); err == nil {
			sent++
		}
	}
	fmt.Println("sent", sent)
	// Output: sent 100
}
