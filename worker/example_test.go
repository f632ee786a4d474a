package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/client/clienttest"
	"github.com/raftq/raftq/worker"
)

func Example() {
	// A fake node so the example runs on its own; a program dials its
	// cluster.
	srv, err := clienttest.Start()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Stop()
	ctx := context.Background()
	c, err := client.Dial(ctx, []string{srv.Addr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := c.CreateQueue(ctx, "emails", client.QueueOptions{MaxReceives: 3}); err != nil {
		log.Fatal(err)
	}
	for _, typ := range []string{"welcome", "welcome", "invoice", "unknown"} {
		if _, err := c.Send(ctx, "emails", []byte(typ), client.Type(typ)); err != nil {
			log.Fatal(err)
		}
	}

	runCtx, stop := context.WithCancel(ctx)
	var (
		mu      sync.Mutex
		results []string
	)
	w, err := worker.New(c, "emails", worker.Options{
		Wait: time.Second,
		// A handler's error is logged at warn by default; this example
		// reports every outcome from the Settled hook instead.
		OnError: func(_ context.Context, m *worker.Message, err error) {},
		Hooks: worker.Hooks{Settled: func(m *worker.Message, s worker.Settlement) {
			mu.Lock()
			defer mu.Unlock()
			results = append(results, fmt.Sprintf("%s %s: %s", m.ID, m.Type, s.Outcome))
			if len(results) == 4 {
				stop() // a program stops on a signal
			}
		}},
	})
	if err != nil {
		log.Fatal(err) // invalid options: errors.Is(err, client.ErrInvalid)
	}
	w.Register("welcome", func(ctx context.Context, m *worker.Message) error {
		return nil // ack
	})
	w.Register("invoice", func(ctx context.Context, m *worker.Message) error {
		return worker.Retry(time.Minute, errors.New("billing is down")) // nack, ready in a minute
	})
	w.Default(func(ctx context.Context, m *worker.Message) error {
		return worker.Poison(fmt.Errorf("no handler for %q", m.Type)) // dead-letter now
	})
	if err := w.Run(runCtx); err != nil { // returns once in-flight messages are settled
		log.Fatal(err)
	}
	sort.Strings(results)
	for _, r := range results {
		fmt.Println(r)
	}
	// Output:
	// 0-1 welcome: acked
	// 0-2 welcome: acked
	// 0-3 invoice: retried
	// 0-4 unknown: dead_lettered
}

func ExampleWorker_Use() {
	srv, err := clienttest.Start()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Stop()
	ctx := context.Background()
	c, err := client.Dial(ctx, []string{srv.Addr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := c.CreateQueue(ctx, "jobs", client.QueueOptions{}); err != nil {
		log.Fatal(err)
	}
	if _, err := c.Send(ctx, "jobs", []byte("x"), client.Type("resize")); err != nil {
		log.Fatal(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	w, err := worker.New(c, "jobs", worker.Options{
		Wait:   time.Second,
		Logger: slog.New(slog.DiscardHandler),
		Hooks:  worker.Hooks{Settled: func(*worker.Message, worker.Settlement) { stop() }},
	})
	if err != nil {
		log.Fatal(err)
	}
	// Middleware sees every message and its handler's result.
	w.Use(func(next worker.Handler) worker.Handler {
		return func(ctx context.Context, m *worker.Message) error {
			// A step known to outlast the lease asks for more time; the
			// heartbeats keep it.
			if _, err := m.ExtendLease(ctx, 10*time.Minute); err != nil {
				return err
			}
			err := next(ctx, m)
			fmt.Printf("%s took its turn: err=%v\n", m.Type, err)
			return err
		}
	})
	w.Register("resize", func(ctx context.Context, m *worker.Message) error { return nil })
	if err := w.Run(runCtx); err != nil {
		log.Fatal(err)
	}
	// Output: resize took its turn: err=<nil>
}
