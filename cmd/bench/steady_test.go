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
// node processes, with blocking sends and with SendAsync: the ledger must
// find every acknowledged send delivered. The async-capped case runs
// SendAsync under a --rate cap, where the window never fills: its enqueue
// latency must be the cluster's answer time, not how long a send waited in
// the window (64 sends at 200/s would be 320 ms).
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
			if r.Lost != 0 || r.Unknown != 0 || r.SendErrors != 0 {
				t.Errorf("lost %d, unknown sends %d, send errors %d; want none (missing %v, last error %q)", r.Lost, r.Unknown, r.SendErrors, r.Missing, r.LastError)
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
			if tc.name == "async-capped" && r.Enqueue.P50 >= 160 {
				t.Errorf("enqueue p50 %.1f ms under a 200/s cap with 64 in flight: the window's residence time (320 ms), not the answer time", r.Enqueue.P50)
			}
			// The claim once ready is each receive call less the server's
			// wait, so it is booked for every message the call is and is
			// never longer. At 200/s two consumers mostly wait, so if the
			// server's wait were lost the two medians would be equal.
			if r.ReadyClaim.Count != r.Claim.Count || r.ReadyClaim.P99 > r.Claim.P99 {
				t.Errorf("claim once ready %+v against receive call %+v: want the same count, never longer", r.ReadyClaim, r.Claim)
			}
			t.Logf("receive call p50/p99 %.2f/%.2f ms, claim once ready %.2f/%.2f ms", r.Claim.P50, r.Claim.P99, r.ReadyClaim.P50, r.ReadyClaim.P99)
			if tc.name == "async-capped" && r.ReadyClaim.P50 >= r.Claim.P50 {
				t.Errorf("claim once ready p50 %.2f ms, receive call p50 %.2f ms: consumers at 200/s wait, so the call must be longer", r.ReadyClaim.P50, r.Claim.P50)
			}
		})
	}
}
