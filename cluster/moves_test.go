package cluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/shard"
)

// steadyWriter enqueues into shard 0 through whichever node leads it,
// found through n1, until stopped; it returns the ids acknowledged.
func steadyWriter(tc *testCluster, via string) (stop func() []uint64) {
	n := tc.liveNode(via)
	done := make(chan struct{})
	var (
		mu  sync.Mutex
		ids []uint64
		wg  sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			// Each replica is read once: a replica moved off its node is
			// closed and its LocalShard turns nil.
			var target *Node
			if s := n.LocalShard(0); s != nil {
				l, _ := s.Leader()
				target = tc.liveNode(string(l))
			}
			var leader *shard.Shard
			if target != nil {
				leader = target.LocalShard(0)
			}
			if leader == nil {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			res, err := leader.Propose(ctx, &fsmpb.Command{Cmd: &fsmpb.Command_Enqueue{Enqueue: &fsmpb.Enqueue{
				Queue: "q", Messages: []*fsmpb.NewMessage{{Body: fmt.Appendf(nil, "steady-%d", i)}}}}})
			cancel()
			if err == nil && res.GetStatus().GetCode() == fsmpb.Code_CODE_OK {
				mu.Lock()
				ids = append(ids, res.GetEnqueue().GetItems()[0].GetMessageId())
				mu.Unlock()
			}
		}
	}()
	return func() []uint64 {
		close(done)
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(ids)
	}
}

// joinFourth starts n4 with no bootstrap expectation, joined through n1,
// and waits until meta lists it.
func joinFourth(t *testing.T, tc *testCluster) *Node {
	t.Helper()
	tc.define("n4", 0, "n1")
	cfg := tc.cfgs["n4"]
	cfg.Shards = 1
	tc.cfgs["n4"] = cfg
	n4 := tc.start("n4")
	waitFor(t, 30*time.Second, "n4 in the meta configuration", func() error {
		if _, ok := groupSuffrage(tc.nodes["n1"].Meta().Raft(), "n4"); !ok {
			return errors.New("not yet")
		}
		return nil
	})
	return n4
}

// replaced waits until shard 0 sits on n1, n2 and n4 in the map and in the
// group, n3 is out of meta and retired, and no move or drain is left.
func replaced(t *testing.T, tc *testCluster, via string) {
	t.Helper()
	waitFor(t, 90*time.Second, "n3 replaced by n4", func() error {
		n := tc.liveNode(via)
		m := n.ShardMap()
		got := slices.Sorted(slices.Values(m.Replicas[0]))
		if !slices.Equal(got, []string{"n1", "n2", "n4"}) || len(m.Moves) > 0 || len(m.Drains) > 0 || !m.IsRetired("n3") {
			return fmt.Errorf("map replicas %v learners %v moves %v drains %v retired %v", got, m.Learners, m.Moves, m.Drains, m.Retired)
		}
		f := n.Meta().Raft().GetConfiguration()
		if f.Error() != nil {
			return f.Error()
		}
		if voters := votersOf(f.Configuration()); !slices.Equal(voters, []string{"n1", "n2", "n4"}) {
			return fmt.Errorf("meta voters %v", voters)
		}
		f = n.LocalShard(0).Raft().GetConfiguration()
		if f.Error() != nil {
			return f.Error()
		}
		if voters := votersOf(f.Configuration()); !slices.Equal(voters, []string{"n1", "n2", "n4"}) || len(f.Configuration().Servers) != 3 {
			return fmt.Errorf("shard 0 configuration %v", f.Configuration().Servers)
		}
		return nil
	})
}

func votersOf(c raft.Configuration) []string {
	var out []string
	for _, s := range c.Servers {
		if s.Suffrage == raft.Voter {
			out = append(out, string(s.ID))
		}
	}
	slices.Sort(out)
	return out
}

// A drain of n3 to n4, recorded in meta, moves shard 0's replica through
// raft (n4 added as a nonvoter, caught up, promoted, n3 removed) while
// writes go on, then takes n3 out of meta and retires it: every
// acknowledged write is on n4's replica and n3 set its replica aside.
func TestDrainReplacesANodeThroughRaft(t *testing.T) {
	tc := formThree(t)
	before := tc.enqueue(t, "before", 20)
	n4 := joinFourth(t, tc)
	stop := steadyWriter(tc, "n1")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	waitFor(t, 10*time.Second, "drain recorded", func() error {
		l, ok := tc.metaLeader()
		if !ok {
			return errors.New("no meta leader")
		}
		return l.Meta().DrainNode(ctx, "n3", "n4")
	})
	replaced(t, tc, "n1")
	acked := append(stop(), before...)
	if len(acked) < 30 {
		t.Fatalf("only %d writes acknowledged around the move", len(acked))
	}
	waitFor(t, 30*time.Second, "every acknowledged write on n4", func() error {
		if s := n4.LocalShard(0); s == nil {
			return errors.New("n4 holds no replica")
		}
		if miss := missing(n4, acked); len(miss) > 0 {
			return fmt.Errorf("%d missing, e.g. %d", len(miss), miss[0])
		}
		return nil
	})
	waitFor(t, 30*time.Second, "n3 closes its replica and sets it aside", func() error {
		if tc.nodes["n3"].LocalShard(0) != nil {
			return errors.New("still open")
		}
		aside, _ := filepath.Glob(filepath.Join(tc.cfgs["n3"].DataDir, "shards", "0.removed-*"))
		if len(aside) != 1 {
			return fmt.Errorf("set aside: %v", aside)
		}
		return nil
	})
}

// The meta leader dies (a crash: no leadership transfer) while shard 0's
// move is under way; the next meta leader resumes it from its recorded
// phase and the drain completes, with nothing acknowledged lost.
func TestMoveResumesAfterTheMetaLeaderDies(t *testing.T) {
	tc := formThree(t)
	before := tc.enqueue(t, "before", 20)
	n4 := joinFourth(t, tc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The victim leads meta and is not n3 (whose drain it is) nor n4.
	var victim *Node
	waitFor(t, 30*time.Second, "meta led by n1 or n2", func() error {
		l, ok := tc.metaLeader()
		if !ok {
			return errors.New("no meta leader")
		}
		if l.NodeID() != "n1" && l.NodeID() != "n2" {
			_ = l.Meta().TransferLeadership(ctx)
			return fmt.Errorf("led by %s", l.NodeID())
		}
		victim = l
		return nil
	})
	via := "n1"
	if victim.NodeID() == "n1" {
		via = "n2"
	}
	stop := steadyWriter(tc, via)
	if err := victim.Meta().DrainNode(ctx, "n3", "n4"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the move started", func() error {
		if _, ok := victim.ShardMap().MoveOf(0); !ok {
			return errors.New("no move yet")
		}
		return nil
	})
	tc.kill(victim.NodeID())
	replaced(t, tc, via)
	acked := append(stop(), before...)
	waitFor(t, 30*time.Second, "every acknowledged write on n4", func() error {
		if miss := missing(n4, acked); len(miss) > 0 {
			return fmt.Errorf("%d missing, e.g. %d", len(miss), miss[0])
		}
		return nil
	})
}
