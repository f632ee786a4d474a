package cluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/raftgroup"
)

// queuesReconciled checks that every shard replica on every running node
// holds exactly the queues (and policies) of that node's meta replica.
func (tc *testCluster) queuesReconciled() error {
	for _, n := range tc.nodes {
		want := n.Meta().QueuePolicies()
		for _, s := range n.LocalShards() {
			have := s.FSM().Queues()
			if len(have) != len(want) {
				return fmt.Errorf("%s shard %v: %d queues, meta has %d", n.NodeID(), s.Info().LeaderID, len(have), len(want))
			}
			for name, p := range want {
				if !proto.Equal(have[name], p) {
					return fmt.Errorf("%s: queue %s policy %v, meta %v", n.NodeID(), name, have[name], p)
				}
			}
		}
	}
	return nil
}

func (tc *testCluster) everyNodeSeesQueue(name string, vis int64) error {
	for id, n := range tc.nodes {
		q, ok := n.Meta().Queue(name)
		switch {
		case vis == 0 && ok:
			return fmt.Errorf("%s still has queue %s", id, name)
		case vis != 0 && !ok:
			return fmt.Errorf("%s lacks queue %s", id, name)
		case vis != 0 && q.Policy.GetVisibilityTimeoutMs() != vis:
			return fmt.Errorf("%s: queue %s visibility %d, want %d", id, name, q.Policy.GetVisibilityTimeoutMs(), vis)
		}
	}
	return nil
}

// mustCreateQueue creates a queue through whichever node leads meta,
// retrying while leadership moves (as a client would on NotLeader).
func (tc *testCluster) mustCreateQueue(ctx context.Context, name string, p *fsmpb.QueuePolicy) {
	tc.t.Helper()
	waitFor(tc.t, 10*time.Second, "create queue "+name, func() error {
		l, ok := tc.metaLeader()
		if !ok {
			return errors.New("no meta leader")
		}
		_, err := l.Meta().CreateQueue(ctx, name, p)
		return err
	})
}

func pol(vis int64) *fsmpb.QueuePolicy {
	return &fsmpb.QueuePolicy{Mode: fsmpb.QueueMode_QUEUE_MODE_STANDARD, VisibilityTimeoutMs: vis}
}

// transferVotes watches raft groups for vote requests sent by a
// leadership-transfer target (RequestVote with LeadershipTransfer set, which
// only TimeoutNow from the old leader produces). An election after a crash
// or a failed transfer never carries the flag, so seeing the new leader's
// request proves a hand-off, whatever the machine's speed.
type transferVotes struct {
	ch   map[string][]chan raft.Observation // group -> one channel per watched replica
	seen map[string]map[string]bool         // group -> candidate ids seen
}

func newTransferVotes() *transferVotes {
	return &transferVotes{ch: map[string][]chan raft.Observation{}, seen: map[string]map[string]bool{}}
}

func (tv *transferVotes) watch(t *testing.T, group string, r *raft.Raft) {
	ch := make(chan raft.Observation, 64)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		req, ok := o.Data.(raft.RequestVoteRequest)
		return ok && req.LeadershipTransfer
	})
	r.RegisterObserver(obs)
	t.Cleanup(func() { r.DeregisterObserver(obs) })
	tv.ch[group] = append(tv.ch[group], ch)
}

// by reports whether candidate asked group's replicas for votes as a
// leadership-transfer target.
func (tv *transferVotes) by(group, candidate string) bool {
	for _, ch := range tv.ch[group] {
		for drained := false; !drained; {
			select {
			case o := <-ch:
				if tv.seen[group] == nil {
					tv.seen[group] = map[string]bool{}
				}
				tv.seen[group][string(o.Data.(raft.RequestVoteRequest).ID)] = true
			default:
				drained = true
			}
		}
	}
	return tv.seen[group][candidate]
}

func TestCluster_FormServeJoinRestart(t *testing.T) {
	tc := newTestCluster(t)
	tc.define("n1", 3)
	tc.define("n2", 3, "n1")
	tc.define("n3", 3, "n1", "n2")
	order := []string{"n1", "n2", "n3"}
	rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	// Every node seeds from every other, so any start order converges.
	for _, id := range order {
		cfg := tc.cfgs[id]
		cfg.Join = []string{tc.cfgs["n1"].GossipBind, tc.cfgs["n2"].GossipBind, tc.cfgs["n3"].GossipBind}
		// raft gives a leadership transfer one ElectionTimeout (500 ms by
		// default) to catch the target up and send TimeoutNow; 2 s keeps
		// the shutdown hand-off checked below from timing out into a plain
		// election on a loaded CI machine. Elections still start after the
		// default 500 ms heartbeat timeout.
		cfg.Raft.ElectionTimeout = 2 * time.Second
		tc.cfgs[id] = cfg
	}
	for _, id := range order {
		tc.start(id)
		time.Sleep(time.Duration(rand.IntN(200)) * time.Millisecond)
	}
	tc.waitReady(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// One shard map, the same everywhere, 4 shards x 3 replicas.
	first := tc.nodes["n1"].ShardMap()
	if first.Count != 4 || len(first.Replicas) != 4 {
		t.Fatalf("shard map %+v", first)
	}
	for id, n := range tc.nodes {
		if m := n.ShardMap(); !reflect.DeepEqual(m, first) {
			t.Fatalf("%s has another shard map: %+v vs %+v", id, m, first)
		}
		if got := len(n.LocalShards()); got != 4 {
			t.Fatalf("%s hosts %d shards, want 4", id, got)
		}
	}
	if want := meta.Place(4, 3, []string{"n1", "n2", "n3"}); !reflect.DeepEqual(first.Replicas, want) {
		t.Fatalf("placement %v, want rendezvous %v", first.Replicas, want)
	}
	waitFor(t, 15*time.Second, "every shard elects a leader", func() error { _, err := tc.shardLeaders(); return err })
	// A hand-off attempt that fails (e.g. it times out on a loaded machine)
	// is retried only after handOffBackoff (30 s): 45 s leaves room for one
	// retry; a node that never hands off still fails here.
	waitFor(t, 45*time.Second, "every shard led by its preferred replica", func() error {
		leaders, err := tc.shardLeaders()
		if err != nil {
			return err
		}
		for id, l := range leaders {
			if want := first.Replicas[id][0]; l != want {
				return fmt.Errorf("shard %d led by %s, preferred %s", id, l, want)
			}
		}
		return nil
	})

	var leader *Node
	waitFor(t, 10*time.Second, "meta leader", func() error {
		var ok bool
		if leader, ok = tc.metaLeader(); !ok {
			return errors.New("no meta leader")
		}
		return nil
	})
	var follower *Node
	for _, n := range tc.nodes {
		if n != leader {
			follower = n
			break
		}
	}

	t.Run("writes on a follower return NotLeader with the leader id", func(t *testing.T) {
		_, err := follower.Meta().CreateQueue(ctx, "jobs", pol(1000))
		var nl *raftgroup.NotLeaderError
		if !errors.Is(err, raftgroup.ErrNotLeader) || !errors.As(err, &nl) || nl.LeaderID != leader.NodeID() {
			t.Fatalf("follower create: %v (%+v), want NotLeader naming %s", err, nl, leader.NodeID())
		}
		if err := follower.Meta().DeleteQueue(ctx, "jobs"); !errors.Is(err, raftgroup.ErrNotLeader) {
			t.Fatalf("follower delete: %v, want ErrNotLeader", err)
		}
	})

	t.Run("create, update, delete through the leader reach every node and shard", func(t *testing.T) {
		q1, err := leader.Meta().CreateQueue(ctx, "jobs", pol(1000))
		if err != nil {
			t.Fatal(err)
		}
		q2, err := leader.Meta().CreateQueue(ctx, "jobs", pol(1000))
		if err != nil || q2.CreatedMs != q1.CreatedMs {
			t.Fatalf("idempotent create: %v, created %d vs %d", err, q2.CreatedMs, q1.CreatedMs)
		}
		if _, err := leader.Meta().CreateQueue(ctx, "jobs", pol(2000)); !errors.Is(err, meta.ErrExists) {
			t.Fatalf("create with another policy: %v, want ErrExists", err)
		}
		waitFor(t, 10*time.Second, "queue on every node", func() error { return tc.everyNodeSeesQueue("jobs", 1000) })
		waitFor(t, 10*time.Second, "queue in every shard", tc.queuesReconciled)

		if _, err := leader.Meta().UpdateQueue(ctx, "jobs", pol(5000)); err != nil {
			t.Fatal(err)
		}
		if _, err := leader.Meta().UpdateQueue(ctx, "nope", pol(5000)); !errors.Is(err, meta.ErrNotFound) {
			t.Fatalf("update missing: %v, want ErrNotFound", err)
		}
		waitFor(t, 10*time.Second, "update on every node", func() error { return tc.everyNodeSeesQueue("jobs", 5000) })
		waitFor(t, 10*time.Second, "update in every shard", tc.queuesReconciled)

		if err := leader.Meta().DeleteQueue(ctx, "jobs"); err != nil {
			t.Fatal(err)
		}
		if err := leader.Meta().DeleteQueue(ctx, "jobs"); !errors.Is(err, meta.ErrNotFound) {
			t.Fatalf("second delete: %v, want ErrNotFound", err)
		}
		waitFor(t, 10*time.Second, "delete on every node", func() error { return tc.everyNodeSeesQueue("jobs", 0) })
		waitFor(t, 10*time.Second, "delete in every shard", tc.queuesReconciled)
	})
	if t.Failed() {
		t.FailNow()
	}
	keep, err := leader.Meta().CreateQueue(ctx, "keep", pol(1000))
	if err != nil {
		t.Fatal(err)
	}

	// A node with bootstrap-expect 0 joins as a nonvoter and replicates meta.
	tc.define("n4", 0, "n2")
	n4 := tc.start("n4")
	select {
	case <-n4.Ready():
	case <-time.After(20 * time.Second):
		t.Fatal("n4 not ready")
	}
	waitFor(t, 10*time.Second, "n4 nonvoter with meta state", func() error {
		if _, ok := n4.Meta().Queue("keep"); !ok {
			return errors.New("n4 lacks queue keep")
		}
		return nil
	})
	if suffrage := serverSuffrage(t, leader, "n4"); suffrage != raft.Nonvoter {
		t.Fatalf("n4 suffrage %v, want Nonvoter", suffrage)
	}
	if len(n4.LocalShards()) != 0 || n4.ShardCount() != 4 {
		t.Fatalf("n4 hosts %d shards of %d; the map is fixed over the bootstrap voters", len(n4.LocalShards()), n4.ShardCount())
	}

	// Shutdown of the meta leader hands meta and its shards over: each new
	// leader is the target of a leadership transfer (it asked for votes with
	// the transfer flag), not the winner of an election after the old
	// leader went silent. The flag is the evidence, so the waits below are
	// only liveness bounds: 10 s is far above a transfer (tens of ms) and
	// above an election too, which the flag check tells apart instead.
	oldLeader := leader.NodeID()
	led, _ := tc.shardLeaders()
	votes := newTransferVotes()
	for id, n := range tc.nodes {
		if id == oldLeader {
			continue
		}
		votes.watch(t, "meta", n.Meta().Raft())
		for sid, l := range led {
			if s := n.LocalShard(sid); s != nil && l == oldLeader {
				votes.watch(t, fmt.Sprint("shard ", sid), s.Raft())
			}
		}
	}
	tc.stop(oldLeader)
	waitFor(t, 10*time.Second, "meta leadership transferred on shutdown", func() error {
		l, ok := tc.metaLeader()
		if !ok || l.NodeID() == oldLeader {
			return errors.New("no new meta leader yet")
		}
		if !votes.by("meta", l.NodeID()) {
			return fmt.Errorf("new meta leader %s was not a leadership-transfer target", l.NodeID())
		}
		return nil
	})
	// Only the new leaders themselves are asked: followers learn of them
	// with the next heartbeat, which says nothing about the transfer.
	waitFor(t, 10*time.Second, "shard leadership transferred on shutdown", func() error {
		for id, l := range led {
			if l != oldLeader {
				continue
			}
			found := ""
			for nid, n := range tc.nodes {
				if s := n.LocalShard(id); s != nil && s.IsLeader() {
					found = nid
				}
			}
			if found == "" {
				return fmt.Errorf("shard %d has no leader yet", id)
			}
			if !votes.by(fmt.Sprint("shard ", id), found) {
				return fmt.Errorf("shard %d: new leader %s was not a leadership-transfer target", id, found)
			}
		}
		return nil
	})

	// Writes while it is down, then a restart from its directory catches up.
	tc.mustCreateQueue(ctx, "while-down", pol(3000))
	waitFor(t, 10*time.Second, "queue in every running shard", tc.queuesReconciled)
	// A preferred-leader hand-off may be under way: wait for a settled view.
	var leaders map[uint32]string
	waitFor(t, 10*time.Second, "every shard led", func() error {
		var err error
		leaders, err = tc.shardLeaders()
		return err
	})
	for id, l := range leaders {
		msgs := make([]*fsmpb.NewMessage, 5)
		for i := range msgs {
			msgs[i] = &fsmpb.NewMessage{Body: fmt.Appendf(nil, "shard %d msg %d", id, i)}
		}
		res, err := tc.nodes[l].LocalShard(id).Propose(ctx, &fsmpb.Command{Cmd: &fsmpb.Command_Enqueue{Enqueue: &fsmpb.Enqueue{Queue: "while-down", Messages: msgs}}})
		if err != nil || res.GetStatus().GetCode() != fsmpb.Code_CODE_OK {
			t.Fatalf("enqueue on shard %d: %v %v", id, err, res.GetStatus())
		}
	}
	back := tc.start(oldLeader)
	tc.waitReady(20 * time.Second)
	waitFor(t, 15*time.Second, "restarted node catches up", func() error {
		if _, ok := back.Meta().Queue("while-down"); !ok {
			return errors.New("meta not caught up")
		}
		return tc.shardDigestsMatch(back)
	})

	// Stop everything; the three initial nodes come back from disk without
	// a second bootstrap: n4 stays in the meta configuration and the queue
	// keeps its creation time.
	before := tc.nodes["n1"].ShardMap()
	for _, id := range []string{"n1", "n2", "n3", "n4"} {
		tc.stop(id)
	}
	for _, id := range []string{"n3", "n1", "n2"} {
		tc.start(id)
	}
	tc.waitReady(30 * time.Second)
	waitFor(t, 15*time.Second, "shard leaders after full restart", func() error { _, err := tc.shardLeaders(); return err })
	waitFor(t, 10*time.Second, "meta leader after full restart", func() error {
		var ok bool
		if leader, ok = tc.metaLeader(); !ok {
			return errors.New("no meta leader")
		}
		return nil
	})
	for id, n := range tc.nodes {
		if m := n.ShardMap(); !reflect.DeepEqual(m, before) {
			t.Errorf("%s: shard map changed across restart: %+v vs %+v", id, m, before)
		}
		q, ok := n.Meta().Queue("keep")
		if !ok || q.CreatedMs != keep.CreatedMs {
			t.Errorf("%s: queue keep %v after restart, want created %d", id, q, keep.CreatedMs)
		}
	}
	if s := serverSuffrage(t, leader, "n4"); s != raft.Nonvoter {
		t.Errorf("n4 suffrage %v after restart, want Nonvoter (a re-bootstrap would have dropped it)", s)
	}
}

// shardDigestsMatch checks that every running replica of each shard n
// hosts has applied the same index and holds the same FSM digest.
func (tc *testCluster) shardDigestsMatch(n *Node) error {
	for id := range n.ShardCount() {
		if n.LocalShard(id) == nil {
			continue
		}
		var first string
		var want [32]byte
		var wantIdx uint64
		for nid, other := range tc.nodes {
			s := other.LocalShard(id)
			if s == nil {
				continue
			}
			d, idx, err := s.FSM().Digest()
			if err != nil {
				return err
			}
			if first == "" {
				first, want, wantIdx = nid, d, idx
				continue
			}
			if idx != wantIdx {
				return fmt.Errorf("shard %d: %s applied %d, %s applied %d", id, nid, idx, first, wantIdx)
			}
			if d != want {
				return fmt.Errorf("shard %d: %s and %s differ at index %d", id, nid, first, idx)
			}
		}
		if wantIdx == 0 {
			return fmt.Errorf("shard %d: nothing applied", id)
		}
	}
	return nil
}

func serverSuffrage(t *testing.T, n *Node, id string) raft.ServerSuffrage {
	t.Helper()
	f := n.Meta().Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == id {
			return s.Suffrage
		}
	}
	t.Fatalf("%s not in the meta configuration %v", id, f.Configuration().Servers)
	return 0
}

func TestCluster_NodeWithoutExpectNeverBootstraps(t *testing.T) {
	tc := newTestCluster(t)
	tc.define("solo", 0)
	n := tc.start("solo")
	time.Sleep(1500 * time.Millisecond)
	if n.Meta().HasState() {
		t.Fatal("a node with bootstrap-expect 0 bootstrapped a cluster")
	}
	select {
	case <-n.Ready():
		t.Fatal("ready without a cluster")
	default:
	}
}

func TestCluster_SingleNodeExpectOne(t *testing.T) {
	tc := newTestCluster(t)
	cfg := tc.define("one", 1)
	cfg.Replication = 3 // capped at the one voter
	tc.cfgs["one"] = cfg
	n := tc.start("one")
	tc.waitReady(20 * time.Second)
	if got := len(n.LocalShards()); got != 4 {
		t.Fatalf("hosts %d shards, want 4", got)
	}
	for id := range n.ShardCount() {
		if reps := n.ShardReplicas(id); len(reps) != 1 || reps[0] != "one" {
			t.Fatalf("shard %d replicas %v", id, reps)
		}
	}
	if m := n.Members(); len(m) != 1 || m[0].State != "alive" || m[0].RaftAddr != n.RaftAddr() || m[0].GRPCAddr != "grpc-one:1" {
		t.Fatalf("members %+v", m)
	}
}

// A node that crashes is elected around; restarted on a new raft port (as a
// container with a new IP would be) it is found again: leaders update its
// address through raft and it catches up.
func TestCluster_CrashAndRestartOnNewAddress(t *testing.T) {
	tc := newTestCluster(t)
	for _, id := range []string{"n1", "n2", "n3"} {
		tc.define(id, 3)
	}
	all := []string{tc.cfgs["n1"].GossipBind, tc.cfgs["n2"].GossipBind, tc.cfgs["n3"].GossipBind}
	for _, id := range []string{"n1", "n2", "n3"} {
		cfg := tc.cfgs[id]
		cfg.Join = all
		tc.cfgs[id] = cfg
		tc.start(id)
	}
	tc.waitReady(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	waitFor(t, 15*time.Second, "shard leaders", func() error { _, err := tc.shardLeaders(); return err })
	tc.kill("n2")
	// An election after a crash takes about a second; 20 s leaves room for
	// split votes on a loaded machine (a node that never re-elects still fails).
	waitFor(t, 20*time.Second, "the others re-elect every shard and meta", func() error {
		if _, ok := tc.metaLeader(); !ok {
			return errors.New("no meta leader")
		}
		_, err := tc.shardLeaders()
		return err
	})
	cfg := tc.cfgs["n2"]
	cfg.RaftBind = freeAddr(t)
	cfg.RaftAdvertise = cfg.RaftBind
	// The gossip address stays: memberlist lets a crashed node's name move
	// to a new address only after it is declared dead plus
	// DeadNodeReclaimTime and a push/pull, which would only slow the test.
	tc.cfgs["n2"] = cfg
	n2 := tc.start("n2")
	tc.waitReady(20 * time.Second)

	waitFor(t, 20*time.Second, "every group knows n2's new address", func() error {
		for id, n := range tc.nodes {
			groups := map[string]*raft.Raft{"meta": n.Meta().Raft()}
			for _, s := range n.LocalShards() {
				groups[fmt.Sprint(s.Info().LeaderID, "/", s.Raft().String())] = s.Raft()
			}
			for g, r := range groups {
				f := r.GetConfiguration()
				if err := f.Error(); err != nil {
					return err
				}
				for _, srv := range f.Configuration().Servers {
					if srv.ID == "n2" && string(srv.Address) != cfg.RaftAdvertise {
						return fmt.Errorf("%s group %s: n2 at %s", id, g, srv.Address)
					}
				}
			}
		}
		return nil
	})
	tc.mustCreateQueue(ctx, "after-move", pol(1000))
	waitFor(t, 15*time.Second, "moved node replicates meta and shards", func() error {
		if _, ok := n2.Meta().Queue("after-move"); !ok {
			return errors.New("n2 lacks the queue")
		}
		if err := tc.queuesReconciled(); err != nil {
			return err
		}
		return tc.shardDigestsMatch(n2)
	})
}

// A node with another cluster name that gossips to this cluster (a seed
// list naming it, or a reused address the cluster still probes) is ignored:
// it neither joins the member list nor gets meta state.
func TestCluster_OtherClusterNameNeverJoins(t *testing.T) {
	tc := newTestCluster(t)
	cfg := tc.define("one", 1)
	cfg.Replication = 1
	tc.cfgs["one"] = cfg
	one := tc.start("one")
	tc.waitReady(20 * time.Second)

	other := newTestCluster(t)
	stray := other.define("stray", 0)
	stray.Join = []string{cfg.GossipBind}
	other.cfgs["stray"] = stray
	s := other.start("stray")
	time.Sleep(1500 * time.Millisecond)
	if s.Meta().HasState() {
		t.Fatal("a node named for another cluster was added to this one's meta group")
	}
	if m := one.Members(); len(m) != 1 {
		t.Fatalf("members %+v, want only one", m)
	}
	if m := s.Members(); len(m) != 1 {
		t.Fatalf("stray sees members %+v, want only itself", m)
	}
}
