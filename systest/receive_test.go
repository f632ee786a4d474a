package systest

import (
	"fmt"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/internal/testcluster"
	"github.com/raftq/raftq/wire"
)

// A receive larger than any one shard's share is filled from the others:
// a shard that ran short is not asked again, one that filled its share is,
// and nothing is leased beyond what the call returns (the in-flight count
// says so). Each round uses a fresh queue and another node, so the sweep
// starts from different shards: the big shard first (one pass) and a small
// one first (parallel shares, then the big shard again).
func TestCluster_ReceiveGathersAcrossShardsWithoutOverleasing(t *testing.T) {
	const shards = 3
	c := startCluster(t, testcluster.Options{Shards: shards})
	ctx := ctxT(t, 2*time.Minute)
	const big, small, want = 24, 2, 20
	for round := range 6 {
		q := fmt.Sprintf("gather%d", round)
		mustCreateQueue(t, c, q, &raftqv1.QueuePolicy{VisibilityTimeoutMs: 120_000})
		// One group per shard; the big one moves from round to round.
		groups := map[uint32]string{}
		for g := 0; len(groups) < shards; g++ {
			name := fmt.Sprintf("g%d", g)
			if s := wire.ShardFor(q, name, shards); groups[s] == "" {
				groups[s] = name
			}
		}
		bigShard := uint32(round % shards)
		total := 0
		for s, g := range groups {
			n := small
			if s == bigShard {
				n = big
			}
			for k := range n {
				if _, err := msgs(c, k%3).Send(ctx, &raftqv1.SendRequest{Queue: q, GroupId: g, Body: []byte(fmt.Sprintf("%s-%d", g, k))}); err != nil {
					t.Fatalf("send: %v", err)
				}
				total++
			}
		}

		node := round % 3
		got, err := msgs(c, node).Receive(ctx, &raftqv1.ReceiveRequest{Queue: q, MaxMessages: want})
		if err != nil {
			t.Fatalf("round %d: receive %d: %v", round, want, err)
		}
		if n := len(got.GetMessages()); n != want {
			t.Fatalf("round %d: receive of %d with %d ready returned %d", round, want, total, n)
		}
		checkStats(t, c, q, uint64(total-want), want)

		rest, err := msgs(c, node).Receive(ctx, &raftqv1.ReceiveRequest{Queue: q, MaxMessages: 100})
		if err != nil {
			t.Fatalf("round %d: receive the rest: %v", round, err)
		}
		if n := len(rest.GetMessages()); n != total-want {
			t.Fatalf("round %d: second receive returned %d, want the %d left", round, n, total-want)
		}
		checkStats(t, c, q, 0, total)
		seen := map[string]bool{}
		for _, m := range append(got.GetMessages(), rest.GetMessages()...) {
			if seen[m.GetMessageId()] || m.GetReceiveCount() != 1 {
				t.Fatalf("round %d: message %s delivered twice (receive count %d)", round, m.GetMessageId(), m.GetReceiveCount())
			}
			seen[m.GetMessageId()] = true
		}
	}
}

// checkStats asserts a queue's ready and in-flight counts; leases that a
// receive granted but did not return would show as extra in flight.
func checkStats(t *testing.T, c *testcluster.Cluster, q string, ready uint64, inFlight int) {
	t.Helper()
	st, err := queues(c, 0).QueueStats(ctxT(t, 10*time.Second), &raftqv1.QueueStatsRequest{Name: q})
	if err != nil {
		t.Fatalf("stats of %s: %v", q, err)
	}
	if st.GetReady() != ready || st.GetInFlight() != uint64(inFlight) {
		t.Fatalf("%s: ready %d, in flight %d; want %d and %d", q, st.GetReady(), st.GetInFlight(), ready, inFlight)
	}
}
