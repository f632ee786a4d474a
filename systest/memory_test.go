package systest

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/internal/testcluster"
)

// rssAnon is process pid's anonymous resident memory (the heap and
// stacks; file pages such as the log store's are the kernel's to drop).
func rssAnon(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no RssAnon in /proc/%d/status", pid)
	return 0
}

// TestMemoryBudget fills a cluster whose nodes have a small memory budget
// until its leader refuses sends (issue #32): the refusal is
// RESOURCE_EXHAUSTED naming the memory, every node stays up and under its
// budget while producers keep pushing, consumers then drain every
// acknowledged message, and sends are taken again.
func TestMemoryBudget(t *testing.T) {
	const budget = 256 << 20
	c := startCluster(t, testcluster.Options{Shards: 1, Args: []string{"--memory-budget", "256MiB"}})
	ctx := ctxT(t, 4*time.Minute)
	// One attempt: the producer sees each refusal itself.
	cl, err := client.Dial(ctx, c.Addrs(), client.WithRetry(client.RetryPolicy{MaxAttempts: 1, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const q = "flood"
	if _, err := cl.CreateQueue(ctx, q, client.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 64<<10)
	acked := map[string]bool{}
	var refusal error
	// 256 MiB of 64 KiB bodies is 4,096: the budget must refuse well before.
	for i := 0; i < 4096 && refusal == nil; i++ {
		batch := make([]client.Outgoing, 16)
		for j := range batch {
			batch[j] = client.Outgoing{Body: body}
		}
		rs, err := cl.SendBatch(ctx, q, batch)
		if err != nil {
			refusal = err
			break
		}
		for _, r := range rs {
			switch {
			case r.Err == nil:
				acked[r.ID] = true
			case errors.Is(r.Err, client.ErrExhausted):
				refusal = r.Err
			default:
				t.Fatalf("send: %v", r.Err)
			}
		}
	}
	if !errors.Is(refusal, client.ErrExhausted) || !strings.Contains(refusal.Error(), "memory near its budget") {
		t.Fatalf("after %d messages (%d MiB): %v; want RESOURCE_EXHAUSTED naming the memory budget", len(acked), len(acked)/16, refusal)
	}
	t.Logf("refused after %d acknowledged messages (%d MiB of bodies): %v", len(acked), len(acked)/16, refusal)
	// Producers keep pushing: every send is refused, nothing grows.
	for range 50 {
		if _, err := cl.Send(ctx, q, body); !errors.Is(err, client.ErrExhausted) {
			t.Fatalf("a send past the refusal: %v", err)
		}
	}
	for i := range c.Nodes {
		if rss := rssAnon(t, c.PID(i)); rss > budget {
			t.Errorf("node %d holds %d MiB anonymous memory, over its 256 MiB budget", i, rss>>20)
		} else {
			t.Logf("node %d: %d MiB anonymous memory", i, rss>>20)
		}
		if !c.Running(i) {
			t.Fatalf("node %d is down", i)
		}
	}
	// Consumers drain every acknowledged message.
	total, got := len(acked), 0
	for len(acked) > 0 {
		ms, err := cl.Receive(ctx, q, client.ReceiveOptions{Max: 100, Wait: 2 * time.Second})
		if err != nil {
			t.Fatalf("receive after %d of %d: %v", got, total, err)
		}
		if len(ms) == 0 {
			t.Fatalf("the queue ran dry after %d of %d acknowledged messages", got, total)
		}
		receipts := make([]string, len(ms))
		for i, m := range ms {
			if !acked[m.ID] {
				t.Fatalf("received %s, which no send acknowledged", m.ID)
			}
			delete(acked, m.ID)
			receipts[i] = m.Receipt
		}
		got += len(ms)
		if err := cl.AckBatch(ctx, receipts); err != nil {
			t.Fatal(err)
		}
	}
	// Drained, the leader takes sends again: its live heap falls once the
	// drained bodies are unreachable, and its guard measures afresh.
	waitFor(t, ctx, "sends taken again after the drain", func() bool {
		_, err := cl.Send(ctx, q, []byte("again"))
		return err == nil
	})
}
