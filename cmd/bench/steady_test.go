package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/internal/testcluster"
)

var nodeBin string

func TestMain(m *testing.M) { testcluster.Main(m, &nodeBin) }

// TestSteadyAgainstCluster runs the headline workload, shrunk, against real
// node processes, with blocking sends and with SendAsync. It fails on
// correctness: an acknowledged send not delivered, a send stored twice, a
// measurement that is missing or cannot be right (a claim once ready
// longer than its receive call). Latencies and rates are reported, not
// judged: a loaded 2-core machine moves them. The async-capped case runs
// SendAsync under a --rate cap, where the window never fills; that its
// enqueue latency is the answer time, not the time a send sat in the
// window, is TestAsyncEnqueueLatencyEndsAtTheAnswer's.
func TestSteadyAgainstCluster(t *testing.T) {
	c := testcluster.Start(t, nodeBin, testcluster.Options{})
	var metrics []string
	for _, n := range c.Nodes {
		metrics = append(metrics, "http://"+n.HTTP+"/metrics")
	}
	cases := []struct {
		name, mode string
		args       []string
	}{
		{"sync", "sync", []string{"--producers", "4", "--inflight", "8"}},
		{"async", "async", []string{"--producers", "4", "--inflight", "8"}},
		{"async-capped", "async", []string{"--producers", "1", "--inflight", "64", "--rate", "200"}},
	}
	for _, tc := range cases {
		mode := tc.mode
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--consumers", "2",
				"--batch", "32", "--duration", "2s", "--warmup", "500ms", "--drain-timeout", "60s", "--quiet",
				"--metrics", strings.Join(metrics, ","), "--send-mode", mode}, tc.args...)
			cfg := mustParse(t, append([]string{"steady"}, args...)...)
			cfg.Addrs = c.Addrs()
			if err := cfg.validate(); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			res, err := runSteady(ctx, cfg, io.Discard)
			if err != nil {
				t.Fatalf("steady: %v (result %+v)", err, res)
			}
			r := res.(*steadyResult)
			if r.SendMode != mode {
				t.Errorf("send_mode %q, want %q", r.SendMode, mode)
			}
			if r.Lost != 0 {
				t.Errorf("lost %d acknowledged sends (missing %v, last error %q)", r.Lost, r.Missing, r.LastError)
			}
			// A second delivery of one send is a redelivery (its receive
			// count above 1) unless the send was stored twice, which the
			// client's dedup keys forbid.
			if r.Duplicates > r.Redelivered {
				t.Errorf("%d duplicate deliveries but %d redeliveries: sends stored twice", r.Duplicates, r.Redelivered)
			}
			// Whether the hand-offs finished within --settle depends on the
			// machine's load; where the leaders were is always reported.
			if n := len(strings.Fields(r.Placement.Leaders)); n != 4 {
				t.Errorf("placement %q: want 4 shards", r.Placement.Leaders)
			}
			if r.ProcessedPerS <= 0 || r.Ledger.Delivered == 0 {
				t.Errorf("nothing processed: %+v", r)
			}
			// Every node works for every message (replication 3), so each
			// window costs the nodes CPU; the client spends some too.
			if r.CPU.ServerUnreadErr != "" || r.CPU.ServerS <= 0 || r.CPU.ServerUsPerMsg <= 0 || r.CPU.ClientS <= 0 || r.CPU.ClientUsPerMsg <= 0 {
				t.Errorf("cpu figures missing: %+v", r.CPU)
			}
			if r.Ledger.Acked == 0 || r.Enqueue.Count == 0 || r.Claim.Count == 0 || r.E2E.Count == 0 {
				t.Errorf("empty measurements: ledger %+v, enqueue %+v, claim %+v, e2e %+v", r.Ledger, r.Enqueue, r.Claim, r.E2E)
			}
			// The claim once ready is each receive call less the server's
			// wait, so it is booked for every message the call is and is
			// never longer. (That the server's wait reaches the client is
			// client/integration's TestClient_ReceiveTimedSplitsWaitFromClaim.)
			if r.ReadyClaim.Count != r.Claim.Count || r.ReadyClaim.P50 > r.Claim.P50 || r.ReadyClaim.P99 > r.Claim.P99 {
				t.Errorf("claim once ready %+v against receive call %+v: want the same count, never longer", r.ReadyClaim, r.Claim)
			}
			t.Logf("enqueue p50/p99 %.2f/%.2f ms; receive call p50/p99 %.2f/%.2f ms, claim once ready %.2f/%.2f ms; %.0f processed/s; %d unknown sends, %d send errors",
				r.Enqueue.P50, r.Enqueue.P99, r.Claim.P50, r.Claim.P99, r.ReadyClaim.P50, r.ReadyClaim.P99, r.ProcessedPerS, r.Unknown, r.SendErrors)
		})
	}
}
