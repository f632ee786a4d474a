package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/raftq/raftq/raftgroup"
)

// formRebalancing starts n1-n3 with 4 shards and rebalancing on (1 s of
// stability) or off, and defines n4 to join them.
func formRebalancing(t *testing.T, automatic bool) *testCluster {
	t.Helper()
	tc := newTestCluster(t)
	tc.define("n1", 3)
	tc.define("n2", 3, "n1")
	tc.define("n3", 3, "n1")
	tc.define("n4", 0, "n1")
	for _, id := range []string{"n1", "n2", "n3", "n4"} {
		cfg := tc.cfgs[id]
		cfg.DisableRebalance, cfg.RebalanceStable = !automatic, time.Second
		tc.cfgs[id] = cfg
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		tc.start(id)
	}
	tc.waitReady(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tc.mustCreateQueue(ctx, "q", pol(60_000))
	return tc
}

// balanced checks the map (3 replicas and one preferred shard per node),
// that no move runs, and that the shard leaders followed the preferences.
func balanced(tc *testCluster, via string) error {
	n := tc.liveNode(via)
	if n == nil {
		return fmt.Errorf("%s not running", via)
	}
	m := n.ShardMap()
	if len(m.Moves) > 0 {
		return fmt.Errorf("moves running: %v", m.Moves)
	}
	replicas, preferred := map[string]int{}, map[string]int{}
	for id := range m.Count {
		for i, r := range m.Replicas[id] {
			replicas[r]++
			if i == 0 {
				preferred[r]++
			}
		}
	}
	for _, id := range []string{"n1", "n2", "n3", "n4"} {
		if replicas[id] != 3 || preferred[id] != 1 {
			return fmt.Errorf("map: replicas %v preferred %v (%v)", replicas, preferred, m.Replicas)
		}
	}
	leaders, err := tc.shardLeaders()
	if err != nil {
		return err
	}
	for id := range m.Count {
		if leaders[id] != m.Replicas[id][0] {
			return fmt.Errorf("shard %d led by %s, preferred %s", id, leaders[id], m.Replicas[id][0])
		}
	}
	return nil
}

// A joining node receives its share from the meta leader on its own: 3 of
// the 12 replicas and the preference of one shard, which its leader then
// hands it. The meta leader dies (a crash) while a move runs: the next one
// resumes the move; with the dead node's replicas on every shard no new
// move starts until it is back, and then the rebalance completes. Nothing
// acknowledged on shard 0 is lost on any replica.
func TestRebalanceResumesAfterTheMetaLeaderDies(t *testing.T) {
	tc := formRebalancing(t, true)
	acked := tc.enqueue(t, "before", 20)
	tc.start("n4")
	var victim *Node
	waitFor(t, 60*time.Second, "a rebalance move under way", func() error {
		l, ok := tc.metaLeader()
		if !ok {
			return errors.New("no meta leader")
		}
		if len(l.ShardMap().Moves) == 0 {
			return errors.New("no move yet")
		}
		victim = l
		return nil
	})
	mv := victim.ShardMap().Moves[0]
	t.Logf("killing meta leader %s during the move %+v", victim.NodeID(), mv)
	tc.kill(victim.NodeID())
	via := "n4"
	waitFor(t, 60*time.Second, "the move finished by the next meta leader", func() error {
		m := tc.liveNode(via).ShardMap()
		if len(m.Moves) > 0 {
			return fmt.Errorf("moves %v", m.Moves)
		}
		if !slices.Contains(m.Replicas[mv.Shard], mv.To) {
			return fmt.Errorf("shard %d: %v lacks %s", mv.Shard, m.Replicas[mv.Shard], mv.To)
		}
		return nil
	})
	// Every shard has a replica on the dead node: no move may start.
	time.Sleep(3 * time.Second)
	if m := tc.liveNode(via).ShardMap(); len(m.Moves) > 0 {
		t.Fatalf("a move started while %s is down: %v", victim.NodeID(), m.Moves)
	}
	acked = append(acked, tc.enqueue(t, "between", 10)...)
	tc.start(victim.NodeID())
	waitFor(t, 90*time.Second, "balanced once it is back", func() error { return balanced(tc, via) })
	acked = append(acked, tc.enqueue(t, "after", 10)...)
	m := tc.liveNode(via).ShardMap()
	for _, id := range m.Replicas[0] {
		waitFor(t, 30*time.Second, "every acknowledged write on "+id, func() error {
			n := tc.liveNode(id)
			if n == nil || n.LocalShard(0) == nil {
				return errors.New("no replica open")
			}
			if miss := missing(n, acked); len(miss) > 0 {
				return fmt.Errorf("%d missing, e.g. %d", len(miss), miss[0])
			}
			return nil
		})
	}
}

// With automatic rebalancing off a joined node stays empty; a dry run
// shows the plan and changes nothing, a follower names the meta leader,
// and a request on the meta leader carries the plan out; once balanced a
// request has nothing to do, and while a drain runs it is refused.
func TestRebalanceOnRequest(t *testing.T) {
	tc := formRebalancing(t, false)
	tc.start("n4")
	var leader *Node
	var st RebalanceStatus
	waitFor(t, 30*time.Second, "a dry run planning n4's share", func() error {
		l, ok := tc.metaLeader()
		if !ok {
			return errors.New("no meta leader")
		}
		leader = l
		var err error
		if st, err = l.Rebalance(true); err != nil {
			return err
		}
		if len(st.Plan.Moves) != 3 {
			return fmt.Errorf("plan %+v", st.Plan)
		}
		return nil
	})
	if st.Started || st.Automatic {
		t.Fatalf("dry run: %+v", st)
	}
	time.Sleep(2 * time.Second) // beyond RebalanceStable: nothing moves on its own
	if m := leader.ShardMap(); len(m.Moves) > 0 || len(m.ShardsOf("n4")) > 0 {
		t.Fatalf("rebalancing is off, yet moves %v and n4 holds %v", m.Moves, m.ShardsOf("n4"))
	}
	for id, n := range tc.nodes {
		if n == leader {
			continue
		}
		var nl *raftgroup.NotLeaderError
		if _, err := n.Rebalance(true); !errors.As(err, &nl) || nl.LeaderID != leader.NodeID() {
			t.Fatalf("%s: %v, want not-leader naming %s", id, err, leader.NodeID())
		}
	}
	if st, err := leader.Rebalance(false); err != nil || !st.Started {
		t.Fatalf("rebalance: %+v %v", st, err)
	}
	waitFor(t, 90*time.Second, "balanced on request", func() error { return balanced(tc, "n1") })
	if st, err := leader.Rebalance(false); err != nil || st.Started || !st.Plan.Empty() {
		t.Fatalf("rebalance once balanced: %+v %v", st, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := leader.Meta().DrainNode(ctx, "n4", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := leader.Rebalance(false); !errors.Is(err, ErrDraining) {
		t.Fatalf("rebalance during a drain: %v, want ErrDraining", err)
	}
}

// After rebalancing gave n4 replicas, replacing n3 by n4 still completes:
// a replica of n3 whose shard n4 holds already goes to the node that
// lacks it, and every shard ends on n1, n2 and n4.
func TestReplaceOntoANodeThatHoldsTheShard(t *testing.T) {
	tc := formRebalancing(t, true)
	tc.start("n4")
	waitFor(t, 90*time.Second, "balanced", func() error { return balanced(tc, "n1") })
	l, ok := tc.metaLeader()
	if !ok {
		t.Fatal("no meta leader")
	}
	n3, n4 := l.ShardMap().ShardsOf("n3"), l.ShardMap().ShardsOf("n4")
	if !slices.ContainsFunc(n3, func(id uint32) bool { return slices.Contains(n4, id) }) {
		t.Fatalf("n3 %v and n4 %v share no shard: nothing to show", n3, n4)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Meta().DrainNode(ctx, "n3", "n4"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 90*time.Second, "n3 replaced", func() error {
		m := tc.liveNode("n1").ShardMap()
		if !m.IsRetired("n3") || len(m.Moves) > 0 {
			return fmt.Errorf("moves %v drains %v retired %v", m.Moves, m.Drains, m.Retired)
		}
		for id := range m.Count {
			if got := slices.Sorted(slices.Values(m.Replicas[id])); !slices.Equal(got, []string{"n1", "n2", "n4"}) {
				return fmt.Errorf("shard %d on %v", id, got)
			}
		}
		return nil
	})
}
