package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/meta/metapb"
)

// gossipWith is a Node whose gossip table holds the given members alive
// (since an hour ago) and nothing else: enough for the dead-node checks.
func gossipWith(alive ...string) *Node {
	n := &Node{}
	n.gossip = &gossip{n: n, members: map[string]*member{}}
	for _, id := range alive {
		n.gossip.members[id] = &member{
			Member:     Member{NodeID: id, RaftAddr: id + ":1", State: "alive"},
			meta:       &metapb.NodeMeta{NodeId: id},
			aliveSince: time.Now().Add(-time.Hour),
		}
	}
	return n
}

// metaConfigOf is a meta configuration holding every node named, as voters.
func metaConfigOf(groups ...[]string) raft.Configuration {
	var cfg raft.Configuration
	for _, g := range groups {
		for _, id := range g {
			cfg.Servers = append(cfg.Servers, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(id + ":1")})
		}
	}
	return cfg
}

// A dead node is drained only if every shard it holds has a live node to
// take the replica and a quorum of its voters alive besides it: a move
// adds (a nonvoter, then a voter) before it removes, and a group without
// a quorum takes no change.
func TestCannotReplace(t *testing.T) {
	three := func(shards map[uint32][]string) meta.ShardMap {
		return meta.ShardMap{Version: 1, Count: uint32(len(shards)), Replicas: shards}
	}
	for _, tc := range []struct {
		name     string
		m        meta.ShardMap
		alive    []string
		dead     string
		notAlive []string
		want     string // "" or a part of the reason
	}{
		{"a spare node", three(map[uint32][]string{0: {"n1", "n2", "n3"}}), []string{"n1", "n2", "n4"}, "n3", []string{"n3"}, ""},
		{"no spare node", three(map[uint32][]string{0: {"n1", "n2", "n3"}}), []string{"n1", "n2"}, "n3", []string{"n3"}, "no live node can take shard 0"},
		{"the spare holds the other shard", three(map[uint32][]string{0: {"n1", "n2", "n3"}, 1: {"n2", "n3", "n4"}}), []string{"n1", "n2", "n4"}, "n3", []string{"n3"}, ""},
		{"two of three dead", three(map[uint32][]string{0: {"n1", "n2", "n3"}}), []string{"n1", "n4", "n5"}, "n3", []string{"n2", "n3"}, "1 of 3 voters alive, not a quorum"},
		{"two replicas, one dead", three(map[uint32][]string{0: {"n1", "n3"}}), []string{"n1", "n2"}, "n3", []string{"n3"}, "1 of 2 voters alive"},
		{"one replica, dead", three(map[uint32][]string{0: {"n3"}}), []string{"n1", "n2"}, "n3", []string{"n3"}, "0 of 1 voters alive"},
		{"five replicas, two dead", three(map[uint32][]string{0: {"n1", "n2", "n3", "n4", "n5"}}), []string{"n1", "n2", "n3", "n6"}, "n5", []string{"n4", "n5"}, ""},
		{"a retired spare does not count", meta.ShardMap{Version: 1, Count: 1, Replicas: map[uint32][]string{0: {"n1", "n2", "n3"}}, Retired: []string{"n4"}},
			[]string{"n1", "n2", "n4"}, "n3", []string{"n3"}, "no live node can take shard 0"},
		{"a draining spare does not count", meta.ShardMap{Version: 1, Count: 1, Replicas: map[uint32][]string{0: {"n1", "n2", "n3"}}, Drains: []meta.Drain{{Node: "n4"}}},
			[]string{"n1", "n2", "n4"}, "n3", []string{"n3"}, "no live node can take shard 0"},
		{"the target of a drain", meta.ShardMap{Version: 1, Count: 1, Replicas: map[uint32][]string{0: {"n1", "n2", "n3"}}, Drains: []meta.Drain{{Node: "n1", To: "n3"}}},
			[]string{"n1", "n2", "n4"}, "n3", []string{"n3"}, "target of a running drain"},
		{"a move onto it at add", meta.ShardMap{Version: 1, Count: 1, Replicas: map[uint32][]string{0: {"n1", "n2", "n4"}}, Learners: map[uint32][]string{0: {"n3"}},
			Moves: []meta.Move{{Shard: 0, From: "n4", To: "n3", Phase: metapb.MovePhase_MOVE_PHASE_ADD}}}, []string{"n1", "n2", "n4", "n5"}, "n3", []string{"n3"}, "the move of shard 0 onto it is being aborted"},
		{"a promoted move onto it", meta.ShardMap{Version: 1, Count: 1, Replicas: map[uint32][]string{0: {"n1", "n2", "n3", "n4"}},
			Moves: []meta.Move{{Shard: 0, From: "n4", To: "n3", Phase: metapb.MovePhase_MOVE_PHASE_PROMOTE}}}, []string{"n1", "n2", "n4", "n5"}, "n3", []string{"n3"}, "promoted and cannot finish while it is away"},
		{"a meta-only member", three(map[uint32][]string{0: {"n1", "n2", "n3"}}), []string{"n1", "n2", "n3"}, "n4", []string{"n4"}, ""},
	} {
		got := gossipWith(tc.alive...).cannotReplace(tc.m, metaConfigOf(tc.alive, tc.notAlive), tc.dead, tc.notAlive)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: cannotReplace = %q, want %q", tc.name, got, tc.want)
		}
	}
	// A member alive in gossip but never admitted to the meta
	// configuration (its identity not proven) would never open a replica:
	// it is no spare.
	m := three(map[uint32][]string{0: {"n1", "n2", "n3"}})
	if got := gossipWith("n1", "n2", "n4").cannotReplace(m, metaConfigOf([]string{"n1", "n2"}, []string{"n3"}), "n3", []string{"n3"}); !strings.Contains(got, "no live node can take shard 0") {
		t.Errorf("with n4 outside meta: cannotReplace = %q, want no live node", got)
	}
}

// Removing a meta voter without a named replacement promotes a live
// nonvoter only when the voters left would be even.
func TestRemainingVoters(t *testing.T) {
	cfg := raft.Configuration{Servers: []raft.Server{
		{ID: "n1", Suffrage: raft.Voter}, {ID: "n2", Suffrage: raft.Voter}, {ID: "n3", Suffrage: raft.Voter}, {ID: "n4", Suffrage: raft.Nonvoter},
	}}
	if k := remainingVoters(cfg, "n3"); k != 2 {
		t.Fatalf("remainingVoters = %d, want 2", k)
	}
	n := gossipWith("n1", "n2", "n4")
	n.cfg.NonvoterGrace = time.Second
	m := meta.ShardMap{Version: 1}
	if s := n.metaVoterToPromote(m, cfg, "n3"); s == nil || s.ID != "n4" {
		t.Fatalf("metaVoterToPromote = %v, want n4", s)
	}
	m.Retired = []string{"n4"}
	if s := n.metaVoterToPromote(m, cfg, "n3"); s != nil {
		t.Fatalf("a retired nonvoter was picked: %v", s)
	}
}

// A killed member is drained once it has been away for the grace, counted
// afresh by a new meta leader: a leadership change during the grace puts
// the replacement at least a full grace after it. Its shard replica is
// re-created on n4 through raft with every acknowledged write, and n4, a
// meta nonvoter, takes its place as a meta voter.
func TestDeadNodeReplacedAfterGraceCountedByEachLeader(t *testing.T) {
	const grace = 3 * time.Second
	tc := newTestCluster(t)
	tc.form(1, func(_ string, cfg *Config) { cfg.DeadNodeGrace = grace }, "n1", "n2", "n3")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	n4 := joinFourth(t, tc)
	if err := tc.nodes["n3"].Meta().TransferLeadership(ctx); err != nil {
		t.Fatal(err)
	}
	ids := tc.enqueue(t, "before", 20)

	tc.kill("n3")
	time.Sleep(grace - time.Second)
	var old *Node
	waitFor(t, 10*time.Second, "a meta leader", func() error {
		var ok bool
		if old, ok = tc.metaLeader(); !ok {
			return errors.New("none")
		}
		return nil
	})
	if err := old.Meta().TransferLeadership(ctx); err != nil {
		t.Fatal(err)
	}
	transferred := time.Now()
	if n, ok := tc.metaLeader(); ok && n == old {
		t.Fatalf("%s still leads meta after the transfer", old.NodeID())
	}
	var recorded time.Time
	waitFor(t, 30*time.Second, "n3's drain recorded", func() error {
		m := tc.nodes["n1"].ShardMap()
		if m.IsRetired("n3") || slices.ContainsFunc(m.Drains, func(d meta.Drain) bool { return d.Node == "n3" }) {
			recorded = time.Now()
			return nil
		}
		return errors.New("not yet")
	})
	if after := recorded.Sub(transferred); after < grace {
		t.Fatalf("n3's drain was recorded %v after the meta leader changed, within the grace %v: the new leader did not start the clock afresh", after, grace)
	}
	replaced(t, tc, "n1")
	ids = append(ids, tc.enqueue(t, "after", 10)...)
	waitFor(t, 20*time.Second, "n4 holds every acknowledged write", func() error {
		if m := missing(n4, ids); len(m) > 0 {
			return fmt.Errorf("n4 lacks %d", len(m))
		}
		return nil
	})
}
