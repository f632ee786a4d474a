package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/meta/metapb"
	"github.com/raftq/raftq/peer/peerpb"
)

// The meta leader records the abort of a move at add and dies before its
// executor carries it out (held back by a slow MoveEvery); the next meta
// leader resumes the abort from the record: n4 leaves shard 0's group and
// the map, and closes its replica. The abort fenced off promote, and the
// cluster is not stuck: moving n3's replica onto n4 again completes with
// every acknowledged write.
func TestAbortedMoveResumedByTheNextMetaLeader(t *testing.T) {
	tc := newTestCluster(t)
	tc.form(1, func(id string, cfg *Config) {
		if id == "n1" {
			cfg.MoveEvery = time.Hour // records, never acts
		}
	}, "n1", "n2", "n3")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	acked := tc.enqueue(t, "before", 20)
	n4 := joinFourth(t, tc)
	waitFor(t, 30*time.Second, "meta led by n1", func() error {
		l, ok := tc.metaLeader()
		if !ok {
			return errors.New("no meta leader")
		}
		if l.NodeID() != "n1" {
			_ = l.Meta().TransferLeadership(ctx)
			return fmt.Errorf("led by %s", l.NodeID())
		}
		return nil
	})
	n1 := tc.nodes["n1"]
	n4Addr := tc.cfgs["n4"].RaftAdvertise
	waitFor(t, 10*time.Second, "the move recorded (once n4's log format is)", func() error {
		return n1.Meta().MoveStep(ctx, 0, "n3", "n4", n4Addr, metapb.MovePhase_MOVE_PHASE_ADD)
	})
	// What n1's executor would do at add: n4 joins shard 0 as a nonvoter.
	waitFor(t, 10*time.Second, "n4 a nonvoter of shard 0", func() error {
		leaders, err := tc.shardLeaders()
		if err != nil {
			return err
		}
		_, err = tc.nodes[leaders[0]].ChangeGroup(ctx, shardGroup(0), peerpb.GroupChangeRequest_OP_ADD_NONVOTER, "n4", n4Addr)
		return err
	})
	if err := n1.Meta().AbortMove(ctx, 0, "n3", "n4", false); err != nil {
		t.Fatal(err)
	}
	err := n1.Meta().MoveStep(ctx, 0, "n3", "n4", "", metapb.MovePhase_MOVE_PHASE_PROMOTE)
	if !errors.Is(err, meta.ErrRefused) || !strings.Contains(err.Error(), "being aborted") {
		t.Fatalf("promote of an aborting move: %v", err)
	}
	if mv, ok := n1.ShardMap().MoveOf(0); !ok || !mv.Aborting {
		t.Fatalf("n1 carried the abort out itself: %+v %v", mv, ok)
	}
	tc.kill("n1")

	waitFor(t, 30*time.Second, "the abort finished by the next meta leader", func() error {
		n2 := tc.liveNode("n2")
		m := n2.ShardMap()
		if len(m.Moves) > 0 || len(m.Learners[0]) > 0 || m.Hosts(0, "n4") {
			return fmt.Errorf("moves %v learners %v", m.Moves, m.Learners)
		}
		if _, in := groupSuffrage(n2.LocalShard(0).Raft(), "n4"); in {
			return errors.New("n4 still in shard 0's group")
		}
		return nil
	})
	waitFor(t, 30*time.Second, "n4 closes its replica", func() error {
		if n4.LocalShard(0) != nil {
			return errors.New("still open")
		}
		return nil
	})

	acked = append(acked, tc.enqueue(t, "after", 10)...)
	waitFor(t, 10*time.Second, "the drain of n3 to n4 recorded", func() error {
		l, ok := tc.metaLeader()
		if !ok {
			return errors.New("no meta leader")
		}
		return l.Meta().DrainNode(ctx, "n3", "n4")
	})
	replaced(t, tc, "n2")
	waitFor(t, 30*time.Second, "every acknowledged write on n4", func() error {
		if s := n4.LocalShard(0); s == nil {
			return errors.New("n4 holds no replica")
		}
		if miss := missing(n4, acked); len(miss) > 0 {
			return fmt.Errorf("%d missing, e.g. %d", len(miss), miss[0])
		}
		return nil
	})
}

// A replace onto n4, which dies before it catches up: once n4 has been
// away for the dead-node grace, the meta leader aborts the move (n4 leaves
// shard 0's group and the map, the replace is cancelled), and then
// replaces n4 itself, which holds nothing any more: it leaves meta and is
// retired. n3 keeps its replica throughout.
func TestMoveOntoADeadNodeAbortedAfterTheGrace(t *testing.T) {
	const grace = 2 * time.Second
	tc := newTestCluster(t)
	tc.define("n1", 3)
	tc.define("n2", 3, "n1")
	tc.define("n3", 3, "n1")
	for _, id := range []string{"n1", "n2", "n3"} {
		cfg := tc.cfgs[id]
		cfg.Shards = 1
		cfg.DeadNodeGrace = grace
		tc.cfgs[id] = cfg
		tc.start(id)
	}
	tc.waitReady(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	joinFourth(t, tc)
	// n4's log format recorded, so the abort (format 3) may be proposed.
	waitFor(t, 10*time.Second, "n4's log format recorded", func() error {
		if f := tc.nodes["n1"].Meta().NodeFormat("n4"); f < 3 {
			return fmt.Errorf("format %d", f)
		}
		return nil
	})
	tc.kill("n4")
	killed := time.Now()
	waitFor(t, 10*time.Second, "the replace of n3 by n4 recorded", func() error {
		l, ok := tc.metaLeader()
		if !ok {
			return errors.New("no meta leader")
		}
		return l.Meta().DrainNode(ctx, "n3", "n4")
	})
	waitFor(t, 10*time.Second, "the move onto n4 started", func() error {
		if _, ok := tc.nodes["n1"].ShardMap().MoveOf(0); !ok {
			return errors.New("no move")
		}
		return nil
	})
	waitFor(t, 30*time.Second, "the move aborted, the replace cancelled, n4 retired", func() error {
		m := tc.nodes["n1"].ShardMap()
		if len(m.Moves) > 0 || len(m.Drains) > 0 || len(m.Learners[0]) > 0 || !m.IsRetired("n4") || !m.Hosts(0, "n3") {
			return fmt.Errorf("moves %v drains %v learners %v retired %v", m.Moves, m.Drains, m.Learners, m.Retired)
		}
		for _, n := range tc.nodes {
			if _, in := groupSuffrage(n.LocalShard(0).Raft(), "n4"); in {
				return fmt.Errorf("n4 in shard 0's group on %s", n.NodeID())
			}
		}
		return nil
	})
	if took := time.Since(killed); took < grace {
		t.Fatalf("aborted %v after n4 died, within the grace %v", took, grace)
	}
}
