package cluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/raftstore"
)

// formThree starts n1..n3 with one shard and a queue "q".
func formThree(t *testing.T) *testCluster {
	t.Helper()
	tc := newTestCluster(t)
	tc.form(1, nil, "n1", "n2", "n3")
	return tc
}

// form defines and starts the nodes ids, the first every other's seed,
// all bootstrapping on len(ids) voters with shards data shards and tune
// (nil: none) applied to each configuration; then it waits until they are
// ready, creates queue "q" and waits until every shard has it.
func (tc *testCluster) form(shards uint32, tune func(id string, cfg *Config), ids ...string) {
	tc.t.Helper()
	for i, id := range ids {
		if i == 0 {
			tc.define(id, len(ids))
		} else {
			tc.define(id, len(ids), ids[0])
		}
		cfg := tc.cfgs[id]
		cfg.Shards = shards
		if tune != nil {
			tune(id, &cfg)
		}
		tc.cfgs[id] = cfg
		tc.start(id)
	}
	tc.waitReady(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tc.mustCreateQueue(ctx, "q", pol(60_000))
	waitFor(tc.t, 15*time.Second, "queue in every shard", tc.queuesReconciled)
}

// enqueue sends n messages through shard 0's leader and returns the ids
// it acknowledged.
func (tc *testCluster) enqueue(t *testing.T, tag string, n int) []uint64 {
	t.Helper()
	var ids []uint64
	for i := 0; i < n; i++ {
		var res *fsmpb.Result
		waitFor(t, 15*time.Second, "enqueue", func() error {
			leaders, err := tc.shardLeaders()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			res, err = tc.nodes[leaders[0]].LocalShard(0).Propose(ctx, &fsmpb.Command{Cmd: &fsmpb.Command_Enqueue{Enqueue: &fsmpb.Enqueue{
				Queue: "q", Messages: []*fsmpb.NewMessage{{Body: fmt.Appendf(nil, "%s-%d", tag, i), DedupKey: fmt.Sprintf("%s-%d", tag, i)}}}}})
			if err != nil {
				return err
			}
			if res.GetStatus().GetCode() != fsmpb.Code_CODE_OK {
				return fmt.Errorf("enqueue: %v", res.GetStatus())
			}
			return nil
		})
		ids = append(ids, res.GetEnqueue().GetItems()[0].GetMessageId())
	}
	return ids
}

// missing lists the ids the replica of shard 0 on node does not hold.
func missing(n *Node, ids []uint64) []uint64 {
	var out []uint64
	for _, id := range ids {
		if _, ok := n.LocalShard(0).FSM().Message(id); !ok {
			out = append(out, id)
		}
	}
	return out
}

func groupSuffrage(r *raft.Raft, id string) (raft.ServerSuffrage, bool) {
	f := r.GetConfiguration()
	if f.Error() != nil {
		return 0, false
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == id {
			return s.Suffrage, true
		}
	}
	return 0, false
}

type fatals struct {
	mu   sync.Mutex
	errs []error
}

func (f *fatals) record(err error) {
	f.mu.Lock()
	f.errs = append(f.errs, err)
	f.mu.Unlock()
}

func (f *fatals) first() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.errs) == 0 {
		return nil
	}
	return f.errs[0]
}

// A node whose whole data directory is lost comes back empty under its old
// name: it takes no part in raft until a member with state says the
// cluster lists it (it would vote with nothing), then, with no flag, it is
// removed from each group and re-added empty, and catches up.
func TestNodeThatLostItsStateRejoinsAsAFreshReplica(t *testing.T) {
	tc := formThree(t)
	ids := tc.enqueue(t, "before", 20)
	tc.stop("n3")
	if err := os.RemoveAll(tc.cfgs["n3"].DataDir); err != nil {
		t.Fatal(err)
	}
	// The cluster still serves on n1 and n2.
	ids = append(ids, tc.enqueue(t, "while-out", 10)...)

	var f fatals
	cfg := tc.cfgs["n3"]
	cfg.Fatal = f.record
	tc.cfgs["n3"] = cfg
	n3 := tc.start("n3")
	if n3.ident.Verified() || !n3.mux.Isolated() {
		t.Fatalf("an empty n3 takes part in raft before its identity check: verified %v isolated %v", n3.ident.Verified(), n3.mux.Isolated())
	}
	waitFor(t, 40*time.Second, "n3 rejoined as a voter everywhere", func() error {
		if len(n3.ident.Rejoining()) > 0 {
			return fmt.Errorf("still rejoining %v", n3.ident.Rejoining())
		}
		if s, ok := groupSuffrage(tc.nodes["n1"].Meta().Raft(), "n3"); !ok || s != raft.Voter {
			return fmt.Errorf("meta suffrage %v %v", s, ok)
		}
		sh := n3.LocalShard(0)
		if sh == nil {
			return errors.New("shard 0 not open on n3")
		}
		if s, ok := groupSuffrage(sh.Raft(), "n3"); !ok || s != raft.Voter {
			return fmt.Errorf("shard suffrage %v %v", s, ok)
		}
		if m := missing(n3, ids); len(m) > 0 {
			return fmt.Errorf("n3 lacks %d acknowledged messages", len(m))
		}
		return nil
	})
	if err := f.first(); err != nil {
		t.Fatalf("rejoining start reported %v", err)
	}
	waitFor(t, 15*time.Second, "replicas agree", func() error { return tc.shardDigestsMatch(n3) })
	for _, want := range []string{"meta OP_REMOVE n3", "meta OP_ADD_NONVOTER n3", "meta OP_PROMOTE n3"} {
		if !slices.Contains(tc.groupChanges(), want) {
			t.Fatalf("n3's empty meta replica was not removed and re-added (no %q): %v", want, tc.groupChanges())
		}
	}
	if !n3.ident.Verified() || n3.mux.Isolated() {
		t.Fatalf("after repair: verified %v isolated %v", n3.ident.Verified(), n3.mux.Isolated())
	}
}

// A shard replica whose log was damaged while its node was down is left
// out (the node still serves through the others) until `repair`, which
// removes it from the group and re-adds it empty.
func TestDamagedShardReplicaIsLeftOutUntilRepaired(t *testing.T) {
	tc := formThree(t)
	ids := tc.enqueue(t, "before", 30)
	tc.stop("n3")
	dir := filepath.Join(tc.cfgs["n3"].DataDir, "shards", "0")
	if err := os.Remove(filepath.Join(dir, "raft.db")); err != nil {
		t.Fatal(err)
	}
	n3 := tc.start("n3")
	select {
	case <-n3.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("n3 not ready with a damaged shard replica")
	}
	d, ok := n3.Damaged()["shard-0"]
	if !ok || d.Reason != raftstore.ReasonStoreMissing {
		t.Fatalf("damaged replicas %v", n3.Damaged())
	}
	if n3.LocalShard(0) != nil {
		t.Fatal("the damaged replica was opened")
	}
	ids = append(ids, tc.enqueue(t, "while-damaged", 10)...)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res := n3.Repair(ctx)
	if len(res) != 1 || res[0].GetGroup() != "shard-0" || !strings.Contains(res[0].GetOutcome(), "re-created empty") {
		t.Fatalf("repair: %v", res)
	}
	waitFor(t, 40*time.Second, "n3's shard replica rejoined as a voter with every message", func() error {
		sh := n3.LocalShard(0)
		if sh == nil {
			return errors.New("not open")
		}
		if s, ok := groupSuffrage(sh.Raft(), "n3"); !ok || s != raft.Voter {
			return fmt.Errorf("suffrage %v %v", s, ok)
		}
		if len(n3.ident.Rejoining()) > 0 {
			return fmt.Errorf("still rejoining %v", n3.ident.Rejoining())
		}
		if m := missing(n3, ids); len(m) > 0 {
			return fmt.Errorf("lacks %d", len(m))
		}
		return nil
	})
	if len(n3.Damaged()) != 0 {
		t.Fatalf("still damaged: %v", n3.Damaged())
	}
	aside, _ := filepath.Glob(dir + ".damaged-*")
	if len(aside) != 1 {
		t.Fatalf("damaged directory not kept aside: %v", aside)
	}
}

// The loss sequence: acknowledged writes committed on n2 and n3
// only; n3 loses its stable store and log (snapshots kept), n2 dies, n1
// and n3 restart. Before, n1 and the forgetful n3 elected n1 and the
// writes were gone for good. Now n3's replica refuses to take part, so
// the shard has no leader until n2 returns, and then nothing is lost.
func TestForgetfulReplicaCannotElectALeaderWithoutTheWrites(t *testing.T) {
	tc := formThree(t)
	base := tc.enqueue(t, "base", 5)
	tc.stop("n1")
	acked := tc.enqueue(t, "acked", 50)
	tc.stop("n3")
	dir := filepath.Join(tc.cfgs["n3"].DataDir, "shards", "0")
	for _, name := range []string{"raft.db", "wal"} {
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	tc.kill("n2")
	n1 := tc.start("n1")
	n3 := tc.start("n3")
	// For longer than many election timeouts, no replica of shard 0 leads.
	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) {
		if s := n1.LocalShard(0); s != nil && s.Raft().State() == raft.Leader {
			t.Fatalf("n1 became leader of shard 0 without the acknowledged writes (its vote came from %v)", n3.Damaged())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, ok := n3.Damaged()["shard-0"]; !ok {
		t.Fatalf("n3 did not find its replica damaged: %v", n3.Damaged())
	}
	tc.start("n2")
	waitFor(t, 30*time.Second, "a leader with every acknowledged write", func() error {
		leaders, err := tc.shardLeaders()
		if err != nil {
			return err
		}
		if m := missing(tc.nodes[leaders[0]], append(base, acked...)); len(m) > 0 {
			return fmt.Errorf("leader %s lacks %d acknowledged messages", leaders[0], len(m))
		}
		if m := missing(n1, append(base, acked...)); len(m) > 0 {
			return fmt.Errorf("n1 lacks %d", len(m))
		}
		return nil
	})
}

// diverge changes a replica's state behind raft's back, as a bug or a bad
// memory bit would: an enqueue applied to its FSM alone.
func diverge(t *testing.T, n *Node) {
	t.Helper()
	s := n.LocalShard(0)
	data, err := fsm.EncodeEntry(&fsmpb.Entry{Version: fsm.EntryVersion, NowMs: time.Now().UnixMilli(), Commands: []*fsmpb.Command{
		{Cmd: &fsmpb.Command_Enqueue{Enqueue: &fsmpb.Enqueue{Queue: "q", Messages: []*fsmpb.NewMessage{{Body: []byte("only here")}}}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	s.FSM().Apply(&raft.Log{Index: s.Raft().AppliedIndex(), Term: s.Raft().CurrentTerm(), Type: raft.LogCommand, Data: data})
}

// Leaders compare their replicas' state digests continuously: a follower
// whose state diverged is told and stops; a leader that is the odd one out
// stops itself; repair brings either back.
func TestDivergedReplicasAreFenced(t *testing.T) {
	tc := newTestCluster(t)
	for i, id := range []string{"n1", "n2", "n3"} {
		var join []string
		if i > 0 {
			join = []string{"n1"}
		}
		cfg := tc.define(id, 3, join...)
		cfg.Shards, cfg.DigestInterval = 1, 300*time.Millisecond
		tc.cfgs[id] = cfg
		tc.start(id)
	}
	tc.waitReady(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tc.mustCreateQueue(ctx, "q", pol(60_000))
	waitFor(t, 15*time.Second, "queue in every shard", tc.queuesReconciled)
	ids := tc.enqueue(t, "a", 10)

	leaderOf := func() *Node {
		var l *Node
		waitFor(t, 15*time.Second, "shard leader", func() error {
			leaders, err := tc.shardLeaders()
			if err != nil {
				return err
			}
			l = tc.nodes[leaders[0]]
			return nil
		})
		return l
	}
	leader := leaderOf()
	waitFor(t, 20*time.Second, "a comparison that matched", func() error {
		if st := leader.DigestStats(); st.Matched == 0 {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})

	for _, who := range []string{"follower", "leader"} {
		leader = leaderOf()
		victim := leader
		if who == "follower" {
			for _, n := range tc.nodes {
				if n != leader {
					victim = n
					break
				}
			}
		}
		diverge(t, victim)
		waitFor(t, 20*time.Second, who+" fenced", func() error {
			d, ok := victim.Damaged()["shard-0"]
			if !ok {
				return errors.New("not yet")
			}
			if d.Reason != raftstore.ReasonDiverged {
				return fmt.Errorf("reason %s", d.Reason)
			}
			if victim.LocalShard(0) != nil {
				return errors.New("still open")
			}
			return nil
		})
		ids = append(ids, tc.enqueue(t, "after-"+who, 5)...)
		res := victim.Repair(ctx)
		if len(res) != 1 || !strings.Contains(res[0].GetOutcome(), "re-created empty") {
			t.Fatalf("repair of the %s: %v", who, res)
		}
		waitFor(t, 40*time.Second, who+" back with every message", func() error {
			if len(victim.ident.Rejoining()) > 0 || victim.LocalShard(0) == nil {
				return errors.New("rejoining")
			}
			if m := missing(victim, ids); len(m) > 0 {
				return fmt.Errorf("lacks %d", len(m))
			}
			return nil
		})
	}
	waitFor(t, 20*time.Second, "replicas agree again", func() error {
		for _, n := range tc.nodes {
			if err := tc.shardDigestsMatch(n); err != nil {
				return err
			}
		}
		return nil
	})
}

// A node started with --repair right after it stopped may have led the
// group of its damaged replica: the others have not elected a leader yet,
// so the first removal is refused. The repair is tried again until it
// takes.
func TestRepairAtStartWaitsForTheGroupsNewLeader(t *testing.T) {
	tc := formThree(t)
	ids := tc.enqueue(t, "before", 20)
	leaders, err := tc.shardLeaders()
	if err != nil {
		t.Fatal(err)
	}
	victim := leaders[0]
	tc.kill(victim)
	if err := os.Remove(filepath.Join(tc.cfgs[victim].DataDir, "shards", "0", "raft.db")); err != nil {
		t.Fatal(err)
	}
	cfg := tc.cfgs[victim]
	cfg.Repair = true
	tc.cfgs[victim] = cfg
	n := tc.start(victim)
	waitFor(t, 60*time.Second, victim+"'s shard replica repaired and back as a voter", func() error {
		if d := n.Damaged(); len(d) > 0 {
			return fmt.Errorf("still damaged: %v", d)
		}
		sh := n.LocalShard(0)
		if sh == nil {
			return errors.New("not open")
		}
		if s, ok := groupSuffrage(sh.Raft(), victim); !ok || s != raft.Voter {
			return fmt.Errorf("suffrage %v %v", s, ok)
		}
		if len(n.ident.Rejoining()) > 0 {
			return fmt.Errorf("still rejoining %v", n.ident.Rejoining())
		}
		if m := missing(n, ids); len(m) > 0 {
			return fmt.Errorf("lacks %d", len(m))
		}
		return nil
	})
}

// Under steady writes the leader is always a few entries ahead of a
// replica catching up; the rejoin must still end with a promotion while
// the writes go on.
func TestRejoinFinishesUnderSteadyWrites(t *testing.T) {
	tc := formThree(t)
	tc.enqueue(t, "before", 20)
	tc.stop("n3")
	if err := os.Remove(filepath.Join(tc.cfgs["n3"].DataDir, "shards", "0", "raft.db")); err != nil {
		t.Fatal(err)
	}
	cfg := tc.cfgs["n3"]
	cfg.Repair = true
	tc.cfgs["n3"] = cfg

	// The writer runs beside the test goroutine: it finds the leader
	// through n1 and the live map, never through tc.nodes.
	// Eight writers, each pausing a random 0-2 ms between writes so their
	// proposals do not all travel in one group commit: an entry is almost
	// always on its way.
	n1 := tc.nodes["n1"]
	stop := make(chan struct{})
	done := make(chan int)
	const writers = 8
	for w := range writers {
		go func() {
			sent := 0
			defer func() { done <- sent }()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				l, _ := n1.LocalShard(0).Leader()
				leader := tc.liveNode(string(l))
				if leader == nil || leader.LocalShard(0) == nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := leader.LocalShard(0).Propose(ctx, &fsmpb.Command{Cmd: &fsmpb.Command_Enqueue{Enqueue: &fsmpb.Enqueue{
					Queue: "q", Messages: []*fsmpb.NewMessage{{Body: fmt.Appendf(nil, "steady-%d-%d", w, i)}}}}})
				cancel()
				if err == nil {
					sent++
				}
			}
		}()
	}
	n3 := tc.start("n3")
	waitFor(t, 60*time.Second, "n3's shard replica promoted while the writes go on", func() error {
		sh := n3.LocalShard(0)
		if sh == nil {
			return errors.New("not open")
		}
		if s, ok := groupSuffrage(sh.Raft(), "n3"); !ok || s != raft.Voter {
			return fmt.Errorf("suffrage %v %v", s, ok)
		}
		if len(n3.ident.Rejoining()) > 0 {
			return fmt.Errorf("still rejoining %v", n3.ident.Rejoining())
		}
		return nil
	})
	close(stop)
	sent := 0
	for range writers {
		sent += <-done
	}
	if sent < 10 {
		t.Fatalf("only %d writes went on during the rejoin", sent)
	}
}
