package grayfail

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/internal/testenv"
	"github.com/raftq/raftq/jepsen-lite/netns"
	"github.com/raftq/raftq/jepsen-lite/nodes"
	"github.com/raftq/raftq/wire"
)

// The bar for a gray failure of a shard leader: acknowledged sends never
// stop for this long, counted from the start of the fault, and nothing
// acknowledged is lost.
const maxGap = 3 * time.Second

// faultFor is how long each one-way cut lasts: long enough that every
// timeout a client or a forwarding node could sit out (the client's 10 s
// per attempt, a 5 s caller deadline) would show as a gap.
const faultFor = 20 * time.Second

// shards is the cluster's shard count. The load goes to one shard; the
// others exist so that the node cut off, which leads the loaded shard,
// forwards calls for them to its peers and so holds open connections to
// them when the fault starts, as any node of a running cluster does. A
// forward on a fresh connection fails within gRPC's connect timeout; one
// on an open connection whose replies are dropped waited for the
// caller's deadline.
const shards = 3

// startNetCluster starts a 3-node, 3-shard cluster of real raftq-node
// processes, each in its own network namespace, and waits until every
// node serves and agrees on the shard's leader. Everything is torn down
// when t ends.
func startNetCluster(t *testing.T, ctx context.Context) (*netns.Net, *nodes.Cluster) {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireTools(t, "ip", "iptables")
	if _, err := netns.Sweep(ctx); err != nil {
		t.Fatalf("sweep networks of dead runs: %v", err)
	}
	nw, err := netns.Create(ctx, 3)
	if err != nil {
		t.Fatalf("create network: %v", err)
	}
	t.Cleanup(func() {
		if err := nw.Destroy(context.Background()); err != nil {
			t.Errorf("destroy network: %v", err)
		}
	})
	dir := t.TempDir()
	cl, err := nodes.New(nodeBin, dir, nw, shards, len(nw.Nodes))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cl.KillAll(context.Background())
		if t.Failed() {
			for _, n := range cl.Nodes {
				logTail(t, n.Log, 40)
			}
		}
	})
	for i := range cl.Nodes {
		if err := cl.Start(i, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	return nw, cl
}

func logTail(t *testing.T, path string, n int) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Logf("%s: %v", path, err)
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	t.Logf("last lines of %s:\n%s", path, strings.Join(lines, "\n"))
}

// createQueue creates queue, retrying while the control plane settles.
func createQueue(t *testing.T, ctx context.Context, c *client.Client, queue string) {
	t.Helper()
	for {
		_, err := c.CreateQueue(ctx, queue, client.QueueOptions{})
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("create queue %s: %v", queue, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// leadersOf waits for the nodes to agree on every shard's leader and
// returns shard -> node slot.
func leadersOf(t *testing.T, ctx context.Context, cl *nodes.Cluster) map[uint32]int {
	t.Helper()
	if err := cl.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	ls := cl.Leaders(ctx)
	if len(ls) != shards {
		t.Fatalf("leaders of %d shards known after the cluster agreed on all %d", len(ls), shards)
	}
	return ls
}

// warmForwarding makes node forward one send to the leader of each shard
// it does not lead, so it holds a connection to each of them, and returns
// the nodes it forwarded to.
func warmForwarding(t *testing.T, ctx context.Context, cl *nodes.Cluster, node int, queue string, leaders map[uint32]int) []string {
	t.Helper()
	var to []string
	for s, l := range leaders {
		if l == node || slices.Contains(to, cl.NodeID(l)) {
			continue
		}
		g := groupOn(queue, s)
		// Right after a heal a node may still be reconnecting to a peer
		// (gRPC's reconnect backoff, up to 3 s): it refuses meanwhile.
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		for {
			_, err := raftqv1.NewMessagesClient(cl.Conn(node)).Send(wctx, &raftqv1.SendRequest{Queue: queue, GroupId: g, Body: []byte("warm-" + g)})
			if err == nil {
				break
			}
			if status.Code(err) != codes.Unavailable || wctx.Err() != nil {
				cancel()
				t.Fatalf("send via %s to shard %d: %v", cl.NodeID(node), s, err)
			}
			t.Logf("send via %s to shard %d: %v (retrying)", cl.NodeID(node), s, err)
			time.Sleep(200 * time.Millisecond)
		}
		cancel()
		to = append(to, cl.NodeID(l))
	}
	return to
}

// mostForwarding picks the shard to load and cut off: the one whose leader
// leads the fewest other shards, so it forwards to the most peers.
func mostForwarding(leaders map[uint32]int) uint32 {
	led := map[int]int{}
	for _, l := range leaders {
		led[l]++
	}
	best := uint32(0)
	for s := range uint32(shards) {
		if led[leaders[s]] < led[leaders[best]] {
			best = s
		}
	}
	return best
}

// groupOn returns a message group whose messages of queue live on shard s.
func groupOn(queue string, s uint32) string {
	for i := 0; ; i++ {
		if g := fmt.Sprintf("g%d", i); wire.ShardFor(queue, g, shards) == s {
			return g
		}
	}
}

// A shard leader cut off one way from both its peers: it can no longer
// receive from them (it stops hearing their acknowledgements and steps
// down, but still reaches them), or nothing it sends reaches them (they
// elect a new leader, whose heartbeats it still hears). Clients reach
// every node throughout, so they keep calling the cut node. The test
// measures the longest stretch without an acknowledged send from the
// start of the fault, then heals and checks that every acknowledged send
// is in the queue once.
func TestOneWayPartitionOfShardLeader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	nw, cl := startNetCluster(t, ctx)
	addrs := make([]string, len(cl.Nodes))
	for i := range cl.Nodes {
		addrs[i] = cl.Addr(i)
	}
	c, err := client.Dial(ctx, addrs, client.WithTLS(cl.ClientCreds()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	createQueue(t, ctx, c, "warm")
	for _, tc := range []struct {
		name string
		// cut applies the fault to the leader and one peer.
		cut func(leader, peer int) error
	}{
		{"leader stops receiving", func(leader, peer int) error { return nw.CutOneWay(ctx, peer, leader) }},
		{"leader's sends dropped", func(leader, peer int) error { return nw.CutOneWay(ctx, leader, peer) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			queue := strings.ReplaceAll(tc.name, " ", "-")
			queue = strings.ReplaceAll(queue, "'", "")
			createQueue(t, ctx, c, queue)
			leaders := leadersOf(t, ctx, cl)
			target := mostForwarding(leaders)
			leader := leaders[target]
			peers := warmForwarding(t, ctx, cl, leader, "warm", leaders)
			t.Logf("%s leads shard %d and forwards to %v", cl.NodeID(leader), target, peers)
			l := startLoad(ctx, c, queue, queue, target, 8)
			stopped := false
			defer func() {
				if !stopped {
					l.halt()
				}
			}()
			// Steady load first, so the client has learned the leader and
			// holds connections to it.
			if err := l.waitAcks(ctx, 200); err != nil {
				t.Fatalf("before the fault: %v", err)
			}
			t.Logf("cutting %s (leader of shard %d) one way from its peers for %v", cl.NodeID(leader), target, faultFor)
			start := time.Now()
			for p := range cl.Nodes {
				if p != leader {
					if err := tc.cut(leader, p); err != nil {
						t.Fatal(err)
					}
				}
			}
			before := l.count()
			time.Sleep(faultFor)
			end := time.Now()
			during := l.count() - before
			// The fault took: the peers moved the shard to one of them.
			for p := range cl.Nodes {
				if p == leader {
					continue
				}
				st, err := cl.Status(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				for _, sh := range st.GetShards() {
					if sh.GetShardId() == target && sh.GetLeaderId() == cl.NodeID(leader) {
						t.Fatalf("%s still sees %s leading shard %d at the end of the fault", cl.NodeID(p), cl.NodeID(leader), target)
					}
				}
			}
			if err := nw.Heal(ctx); err != nil {
				t.Fatal(err)
			}
			if err := l.waitAcks(ctx, 100); err != nil {
				t.Fatalf("after healing: %v", err)
			}
			l.halt()
			stopped = true
			gap, at := l.gap(start, end)
			t.Logf("%d sends acknowledged during the %v fault, %d failed attempts; longest gap %v from %v after the fault began",
				during, faultFor, l.errs, gap.Round(time.Millisecond), at.Sub(start).Round(time.Millisecond))
			for _, s := range l.sample {
				t.Logf("  error: %s", s)
			}
			if gap >= maxGap {
				t.Errorf("no send acknowledged for %v (from %v into the fault); want under %v", gap.Round(time.Millisecond), at.Sub(start).Round(time.Millisecond), maxGap)
			}
			checkNothingLost(t, ctx, c, queue, l.acked())
		})
	}
}

// checkNothingLost drains queue and checks that every acknowledged send is
// in it, under the id it was acknowledged with, and that no dedup key was
// enqueued twice.
func checkNothingLost(t *testing.T, ctx context.Context, c *client.Client, queue string, acked map[string]ack) {
	t.Helper()
	seen := drain(ctx, t, c, queue, 3*time.Second)
	lost, moved := 0, 0
	for key, a := range acked {
		ids, ok := seen[key]
		switch {
		case !ok:
			lost++
			if lost <= 5 {
				t.Errorf("acknowledged send %s (id %s, at %s) not in the queue", key, a.id, a.at.Format("15:04:05.000"))
			}
		case ids[0] != a.id || len(ids) > 1:
			moved++
			if moved <= 5 {
				t.Errorf("send %s acknowledged as %s, the queue holds %v", key, a.id, ids)
			}
		}
	}
	extra := 0
	for key, ids := range seen {
		if len(ids) > 1 {
			t.Errorf("dedup key %s enqueued %d times: %v", key, len(ids), ids)
		}
		if _, ok := acked[key]; !ok {
			extra++
		}
	}
	if lost > 0 || moved > 0 {
		t.Errorf("%d of %d acknowledged sends lost, %d under another id", lost, len(acked), moved)
	}
	t.Logf("drained %d messages: every one of %d acknowledged sends present; %d more whose send was not acknowledged", len(seen), len(acked), extra)
}
