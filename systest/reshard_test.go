package systest

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/internal/ledger"
	"github.com/raftq/raftq/internal/testcluster"
	"github.com/raftq/raftq/wire"
)

// Growing a running cluster from 1 shard to 3 under load on a standard and
// a FIFO queue (docs/resharding.md): the CLI's dry
// run plans two new shards and their slot moves, the growth moves a third
// of the slots onto each new shard, new groups land there, dedup keys taken
// before the growth still deduplicate after their slots moved, shrinking is
// refused, and the ledgers find nothing lost, duplicated or out of group
// order.
func TestReshard_GrowUnderLoad(t *testing.T) {
	t.Parallel() // see the package comment
	c := startCluster(t, testcluster.Options{Shards: 1})
	r := newLoadRig(t, c)
	ctx := r.ctx

	// Keys taken by the single shard before the growth, on a queue nobody
	// consumes: after the growth most of their slots belong elsewhere.
	const keyed = "reshardkeys"
	if _, err := r.cl.CreateQueue(ctx, keyed, client.QueueOptions{}); err != nil {
		t.Fatalf("create %s: %v", keyed, err)
	}
	before := map[string]string{}
	for i := range 30 {
		k := fmt.Sprintf("key-%d", i)
		res, err := r.cl.Send(ctx, keyed, []byte(k), client.DedupKey(k))
		if err != nil {
			t.Fatalf("send %s: %v", k, err)
		}
		before[k] = res.ID
	}

	cli := func(i int, args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, cliBin, append([]string{"--addr", c.Nodes[i].GRPC}, args...)...).CombinedOutput()
		return string(out), err
	}
	out, err := cli(1, "cluster", "shards", "set", "3", "--dry-run")
	if err != nil || !strings.Contains(out, "plan: 1 -> 3 shards") || strings.Count(out, "planned") != 2 {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	t.Logf("dry run:\n%s", out)
	if g, err := r.cl.SetShardCount(ctx, 0, false); err != nil || g.Count != 1 {
		t.Fatalf("the dry run changed the shard count: %+v %v", g, err)
	}
	out, err = cli(2, "cluster", "shards", "set", "3")
	if err != nil || !strings.Contains(out, "grown: 1 -> 3 shards") {
		t.Fatalf("grow: %v\n%s", err, out)
	}

	var last client.ShardGrowth
	settled := func() bool {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		g, err := r.cl.SetShardCount(cctx, 0, false)
		if err != nil {
			return false
		}
		last = g
		for _, mv := range g.Moves {
			if mv.Phase != "done" {
				return false
			}
		}
		per := slices.Clone(g.SlotsPerShard)
		slices.Sort(per)
		return g.Count == 3 && slices.Equal(per, []uint32{85, 85, 86})
	}
	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := ledger.WaitFor(wctx, "every slot move done, 85-86 slots per shard", settled, 200*time.Millisecond); err != nil {
		c.DumpLogs()
		t.Fatalf("%v; last: %+v", err, last)
	}
	t.Logf("grown: %+v", last)

	// New groups land on every shard.
	onShard := map[uint32]bool{}
	for i := range 60 {
		res, err := r.cl.Send(ctx, keyed, []byte("spread"), client.Group(fmt.Sprintf("spread-%d", i)))
		if err != nil {
			t.Fatalf("send to group spread-%d: %v", i, err)
		}
		id, err := wire.ParseMessageID(res.ID)
		if err != nil {
			t.Fatalf("message id %q: %v", res.ID, err)
		}
		onShard[id.Shard] = true
	}
	if len(onShard) != 3 {
		t.Fatalf("60 new groups landed on shards %v, want all 3", onShard)
	}

	// Dedup keys taken before the growth hold wherever their slot went.
	for k, id := range before {
		res, err := r.cl.Send(ctx, keyed, []byte(k), client.DedupKey(k))
		if err != nil {
			t.Fatalf("resend %s: %v", k, err)
		}
		if !res.Deduplicated || res.ID != id {
			t.Fatalf("resend of %s after the growth: %+v, want a duplicate of %s", k, res, id)
		}
	}

	out, err = cli(0, "cluster", "shards", "set", "2")
	if err == nil || !strings.Contains(out, "only grows") {
		t.Fatalf("shrinking: %v\n%s", err, out)
	}
	out, err = cli(0, "cluster", "shards")
	if err != nil || !strings.Contains(out, "3 shards") {
		t.Fatalf("cluster shards: %v\n%s", err, out)
	}
	t.Logf("cluster shards:\n%s", out)
	r.finish()
}

// The meta leader, which drives the slot moves, is killed with -9 right
// after the growth is recorded, before or while its slot move starts: the
// next meta leader carries the growth through from what meta records, and
// the ledgers find nothing lost or out of order. (jepsen-lite's reshard
// nemesis kills and isolates nodes in the middle of moves.)
func TestReshard_MetaLeaderKilledMidGrowth(t *testing.T) {
	t.Parallel() // see the package comment
	c := startCluster(t, testcluster.Options{Shards: 1})
	r := newLoadRig(t, c)
	ctx := r.ctx
	if _, err := r.cl.SetShardCount(ctx, 2, false); err != nil {
		t.Fatalf("grow to 2: %v", err)
	}
	leader, _, err := leadersFrom(t, c, 0)
	if err != nil || leader == "" {
		t.Fatalf("meta leader: %q %v", leader, err)
	}
	victim := -1
	for i, n := range c.Nodes {
		if n.ID == leader {
			victim = i
		}
	}
	if victim < 0 {
		t.Fatalf("meta leader %q is not a node of the cluster", leader)
	}
	c.Kill(victim)
	t.Logf("killed the meta leader %s right after the growth was recorded", leader)

	alive := (victim + 1) % len(c.Nodes)
	var last client.ShardGrowth
	done := func() bool {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		cl, err := client.Dial(cctx, []string{c.Nodes[alive].GRPC})
		if err != nil {
			return false
		}
		defer func() { _ = cl.Close() }()
		g, err := cl.SetShardCount(cctx, 0, false)
		if err != nil {
			return false
		}
		last = g
		if g.Count != 2 || len(g.Moves) == 0 {
			return false
		}
		for _, mv := range g.Moves {
			if mv.Phase != "done" {
				return false
			}
		}
		return g.SlotsPerShard[0] == 128 && g.SlotsPerShard[1] == 128
	}
	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := ledger.WaitFor(wctx, "the growth finished by the next meta leader", done, 250*time.Millisecond); err != nil {
		c.DumpLogs()
		t.Fatalf("%v; last: %+v", err, last)
	}
	t.Logf("grown without %s: %+v", leader, last)
	c.Restart(victim)
	if err := c.WaitServing(ctxT(t, 60*time.Second), victim); err != nil {
		t.Fatalf("restart %s: %v", leader, err)
	}
	r.finish()
}
