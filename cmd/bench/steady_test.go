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
// find every acknowledged send delivered.
func TestSteadyAgainstCluster(t *testing.T) {
	c := testcluster.Start(t, nodeBin, testcluster.Options{})
	var metrics []string
	for _, n := range c.Nodes {
		metrics = append(metrics, "http://"+n.HTTP+"/metrics")
	}
	for _, mode := range []string{"sync", "async"} {
		t.Run(mode, func(t *testing.T) {
			cfg := mustParse(t, "steady", "--producers", "4", "--consumers", "2", "--inflight", "8",
				"--batch", "32", "--duration", "2s", "--warmup", "500ms", "--drain-timeout", "60s", "--quiet",
				"--metrics", strings.Join(metrics, ","), "--send-mode", mode)
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
		})
	}
}
