package integration

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/internal/testcluster"
)

// A receive reports how long the server held it before a message was
// ready, so a consumer can tell waiting for work from a slow claim, and the
// nodes' metrics split receives the same way. The cluster has several
// shards, so the wait is the router's wait across them.
func TestClient_ReceiveTimedSplitsWaitFromClaim(t *testing.T) {
	c := testcluster.Start(t, nodeBin, testcluster.Options{})
	cl := mustDial(t, c)
	ctx := ctxT(t, time.Minute)
	if _, err := cl.CreateQueue(ctx, "rw", client.QueueOptions{}); err != nil {
		t.Fatalf("CreateQueue: %v", err)
	}

	// Nothing ready: the long poll waits for a send made later.
	const delay = 600 * time.Millisecond
	type result struct {
		r   *client.Received
		err error
	}
	got := make(chan result, 1)
	start := time.Now()
	go func() {
		r, err := cl.ReceiveTimed(ctx, "rw", client.ReceiveOptions{Max: 1, Wait: 10 * time.Second})
		got <- result{r, err}
	}()
	time.Sleep(delay)
	if _, err := cl.Send(ctx, "rw", []byte("late")); err != nil {
		t.Fatalf("Send: %v", err)
	}
	res := <-got
	call := time.Since(start)
	if res.err != nil || len(res.r.Messages) != 1 {
		t.Fatalf("long poll: %v, %+v", res.err, res.r)
	}
	// Half the delay: the call may reach the node late on a loaded machine,
	// but a lost wait reads 0.
	if w := res.r.Waited; w < delay/2 || w > call {
		t.Errorf("long poll woken by a send %v in: server waited %v of a %v call", delay, w, call)
	}

	// A message already ready: the claim starts at once.
	if _, err := cl.Send(ctx, "rw", []byte("ready")); err != nil {
		t.Fatalf("Send: %v", err)
	}
	r, err := cl.ReceiveTimed(ctx, "rw", client.ReceiveOptions{Max: 1, Wait: 10 * time.Second})
	if err != nil || len(r.Messages) != 1 {
		t.Fatalf("receive of a ready message: %v, %+v", err, r)
	}
	if r.Waited > 100*time.Millisecond {
		t.Errorf("receive of a ready message: server waited %v", r.Waited)
	}

	// Nothing comes: the whole call was waiting.
	start = time.Now()
	r, err = cl.ReceiveTimed(ctx, "rw", client.ReceiveOptions{Max: 1, Wait: 300 * time.Millisecond})
	call = time.Since(start)
	if err != nil || len(r.Messages) != 0 {
		t.Fatalf("empty receive: %v, %+v", err, r)
	}
	if r.Waited < 250*time.Millisecond || r.Waited > call {
		t.Errorf("empty receive of %v: server waited %v", call, r.Waited)
	}

	// The two receives that returned a message are booked, with their
	// waits; the empty one is not.
	sums := scrapeSums(t, c, "raftq_receive_wait_seconds_count", "raftq_receive_claim_seconds_count", "raftq_receive_wait_seconds_sum")
	if sums[0] != 2 || sums[1] != 2 {
		t.Errorf("receives booked: wait %v, claim %v; want 2 each", sums[0], sums[1])
	}
	if waited := time.Duration(sums[2] * float64(time.Second)); waited < delay/2 {
		t.Errorf("raftq_receive_wait_seconds_sum %v, want at least half the long poll's %v", waited, delay)
	}
}

// scrapeSums adds up, over every node's /metrics, the value of each
// unlabelled series named.
func scrapeSums(t *testing.T, c *testcluster.Cluster, names ...string) []float64 {
	t.Helper()
	out := make([]float64, len(names))
	for _, n := range c.Nodes {
		resp, err := http.Get("http://" + n.HTTP + "/metrics")
		if err != nil {
			t.Fatalf("scrape %s: %v", n.ID, err)
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			name, val, ok := strings.Cut(sc.Text(), " ")
			if !ok {
				continue
			}
			for i, want := range names {
				if name == want {
					v, err := strconv.ParseFloat(val, 64)
					if err != nil {
						t.Fatalf("scrape %s: %s: %v", n.ID, sc.Text(), err)
					}
					out[i] += v
				}
			}
		}
		_ = resp.Body.Close()
	}
	return out
}
