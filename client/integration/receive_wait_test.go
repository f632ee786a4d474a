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
// shards, so the wait is the router's wait across them. The test does not
// guess how long the server took to see a call: it waits until the
// nodes' metrics show the long poll parked, and bounds the wait from that.
func TestClient_ReceiveTimedSplitsWaitFromClaim(t *testing.T) {
	c := testcluster.Start(t, nodeBin, testcluster.Options{})
	cl := mustDial(t, c)
	ctx := ctxT(t, time.Minute)
	if _, err := cl.CreateQueue(ctx, "rw", client.QueueOptions{}); err != nil {
		t.Fatalf("CreateQueue: %v", err)
	}

	// Nothing ready: the long poll parks, and waits for a send made later.
	type result struct {
		r   *client.Received
		err error
	}
	got := make(chan result, 1)
	start := time.Now()
	go func() {
		r, err := cl.ReceiveTimed(ctx, "rw", client.ReceiveOptions{Max: 1, Wait: 15 * time.Second})
		got <- result{r, err}
	}()
	for scrapeSums(t, c, "raftq_receive_parked")[0] < 1 {
		if ctx.Err() != nil {
			t.Fatal("the long poll never parked")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The server started waiting before this point, and stops once the
	// send below is ready, so it waits at least the gap between the two.
	parkedSeen := time.Now()
	time.Sleep(300 * time.Millisecond)
	sendAt := time.Now()
	if _, err := cl.Send(ctx, "rw", []byte("late")); err != nil {
		t.Fatalf("Send: %v", err)
	}
	res := <-got
	call := time.Since(start)
	if res.err != nil || len(res.r.Messages) != 1 {
		t.Fatalf("long poll: %v, %+v", res.err, res.r)
	}
	if w, least := res.r.Waited, sendAt.Sub(parkedSeen); w < least || w > call {
		t.Errorf("long poll parked, then woken by a send %v later: server waited %v of a %v call", least, w, call)
	}
	if n := scrapeSums(t, c, "raftq_receive_parked")[0]; n != 0 {
		t.Errorf("%v receives still counted parked after the long poll returned", n)
	}

	// A message already ready: the first look finds it, no wait at all.
	if _, err := cl.Send(ctx, "rw", []byte("ready")); err != nil {
		t.Fatalf("Send: %v", err)
	}
	r, err := cl.ReceiveTimed(ctx, "rw", client.ReceiveOptions{Max: 1, Wait: 10 * time.Second})
	if err != nil || len(r.Messages) != 1 {
		t.Fatalf("receive of a ready message: %v, %+v", err, r)
	}
	if r.Waited != 0 {
		t.Errorf("receive of a ready message: server waited %v", r.Waited)
	}

	// Nothing comes: the whole call was waiting, the full wait asked for.
	const empty = 300 * time.Millisecond
	start = time.Now()
	r, err = cl.ReceiveTimed(ctx, "rw", client.ReceiveOptions{Max: 1, Wait: empty})
	call = time.Since(start)
	if err != nil || len(r.Messages) != 0 {
		t.Fatalf("empty receive: %v, %+v", err, r)
	}
	if r.Waited < empty || r.Waited > call {
		t.Errorf("empty receive with a %v wait, in a %v call: server waited %v", empty, call, r.Waited)
	}

	// The two receives that returned a message are booked, with their
	// waits; the empty one is not.
	sums := scrapeSums(t, c, "raftq_receive_wait_seconds_count", "raftq_receive_claim_seconds_count", "raftq_receive_wait_seconds_sum")
	if sums[0] != 2 || sums[1] != 2 {
		t.Errorf("receives booked: wait %v, claim %v; want 2 each", sums[0], sums[1])
	}
	// The booked wait is the long poll's (the ready receive's is 0); the
	// answer carries it in whole microseconds.
	if waited := time.Duration(sums[2]*float64(time.Second)) + time.Microsecond; waited < res.r.Waited {
		t.Errorf("raftq_receive_wait_seconds_sum %v, want at least the long poll's %v", waited, res.r.Waited)
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
