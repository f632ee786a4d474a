package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/raftq/raftq/client"
)

// placement is which node leads each shard, as one node saw it.
type placement struct {
	// Leaders is "shard=node" per shard in shard order, e.g. "0=n1 1=n2".
	Leaders string `json:"leaders"`
	// Settled: every shard was led by its preferred replica (the first in
	// the shard map) when the run started.
	Settled bool `json:"settled"`
}

// settled reports where leaders are and whether each shard with a live
// preferred replica is led by it. A node hands a shard to its preferred
// replica only after leading it for a while (docs/cluster.md, "Preferred
// leaders"), so a fresh cluster starts unbalanced and moves leaders, each
// move a short write pause, in the first seconds of a run.
func settled(st *client.ClusterStatus) placement {
	alive := map[string]bool{}
	for _, m := range st.Members {
		alive[m.NodeID] = m.State == "alive"
	}
	shards := slices.Clone(st.Shards)
	slices.SortFunc(shards, func(a, b client.ShardInfo) int { return int(a.ID) - int(b.ID) })
	p := placement{Settled: len(shards) > 0}
	parts := make([]string, len(shards))
	for i, s := range shards {
		leader := s.LeaderID
		if leader == "" {
			leader = "-"
			p.Settled = false
		}
		parts[i] = fmt.Sprintf("%d=%s", s.ID, leader)
		if len(s.Replicas) > 0 && alive[s.Replicas[0]] && s.LeaderID != s.Replicas[0] {
			p.Settled = false
		}
	}
	p.Leaders = strings.Join(parts, " ")
	return p
}

// settle waits up to limit for every shard to be led by its preferred
// replica, so runs on a fresh cluster measure the cluster as it will run
// rather than its leadership hand-offs. It never fails a run: past the
// limit it says so on stderr and returns the placement it saw.
func settle(ctx context.Context, c *client.Client, limit time.Duration, stderr io.Writer) placement {
	deadline := time.Now().Add(limit)
	var last placement
	for {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := c.Status(sctx)
		cancel()
		if err == nil {
			last = settled(st)
			if last.Settled {
				return last
			}
		}
		if limit <= 0 || !time.Now().Before(deadline) || ctx.Err() != nil {
			if limit > 0 {
				fmt.Fprintf(stderr, "raftq-bench: shard leaders not on their preferred replicas after %v (%s); measuring anyway\n", limit, last.Leaders)
			}
			return last
		}
		sleep(ctx, 250*time.Millisecond)
	}
}

// row is the report line: the placement and whether it had settled.
func (p placement) row() string {
	if p.Settled {
		return p.Leaders + " (on preferred replicas)"
	}
	return p.Leaders + " (NOT settled: leaders may move during the run)"
}
