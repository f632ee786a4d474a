package systest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/internal/diskfault"
	"github.com/raftq/raftq/raftstore"
)

// Issue #26's loss sequence, with real processes. Roles, not names: the
// "behind" node is stopped first and misses the acknowledged writes; the
// "keeper" and the "forgetful" node commit them; the forgetful node then
// loses what it had, the keeper dies, and the behind and forgetful nodes
// start. Before identity and facts, the forgetful node voted for the behind
// one and every acknowledged write was gone. Now the forgetful replica is
// refused, the shard has no leader until the keeper returns, and nothing
// acknowledged is lost.

// TestLossSequence_StoresDeleted is the sequence as the issue ran it: the
// forgetful node's raft.db and wal/ are deleted, its snapshots kept.
func TestLossSequence_StoresDeleted(t *testing.T) {
	r := newRig(t)
	r.send("base", 20)
	keeper, behind, forgetful := r.roles()
	r.stop(behind, false)
	r.send("acked", 500)
	r.stop(forgetful, false)
	dir := diskfault.ShardDir(r.c.Nodes[forgetful].Dir, 0)
	mustRemove(t, filepath.Join(dir, "raft.db"))
	mustRemove(t, filepath.Join(dir, "wal"))
	r.lossSequence(keeper, behind, forgetful, raftstore.ReasonStoreMissing)
}

// TestLossSequence_DecidingVoteLostItsTail is the variant where the
// forgetful node's vote is exactly the one that would elect the behind
// node: its log lost its tail in place (the segment keeps its size, as
// when a disk drops writes it acknowledged), back to before an entry the
// behind node has, so its log is a prefix of the behind node's. raft's own
// vote check would grant the vote; the facts (the index the replica had
// made durable) refuse the replica.
func TestLossSequence_DecidingVoteLostItsTail(t *testing.T) {
	r := newRig(t)
	r.send("base", 20)
	keeper, behind, forgetful := r.roles()
	last := r.send("last-base", 1)[0]
	// The behind node has applied everything so far, last-base included.
	waitSameDigests(t, r.c, 1)
	r.stop(behind, false)
	r.send("acked", 500)
	// SIGTERM: a clean close writes the facts exactly.
	r.stop(forgetful, false)
	seg, off := r.findBody(forgetful, last)
	if err := diskfault.Zero(seg, off); err != nil {
		t.Fatal(err)
	}
	t.Logf("zeroed %s from the body of %q on: the log ends before an entry %s has", seg, last, r.c.Nodes[behind].ID)
	r.lossSequence(keeper, behind, forgetful, raftstore.ReasonLogShort)
}

// lossSequence kills the keeper, starts the behind and the forgetful
// nodes, and checks that the forgetful replica is refused and nobody leads
// shard 0; then the keeper returns, a leader with every acknowledged
// write is elected, and the forgetful replica is repaired.
func (r *rig) lossSequence(keeper, behind, forgetful int, reason string) {
	t := r.t
	t.Helper()
	id := func(i int) string { return r.c.Nodes[i].ID }
	t.Logf("keeper %s, behind %s, forgetful %s", id(keeper), id(behind), id(forgetful))
	r.stop(keeper, true)
	fromB, fromF := r.logSize(behind), r.logSize(forgetful)
	r.c.Restart(behind)
	r.c.Restart(forgetful)
	r.waitServing(behind)
	r.waitServing(forgetful)
	r.expectDamaged(forgetful, fromF, reason)
	r.noLeaderWhile(behind, fromB, []int{behind, forgetful})
	r.sendFails()

	r.c.Restart(keeper)
	r.waitServing(keeper)
	r.waitLeader()
	r.repair(forgetful, keeper)
	r.verifyAll()
}

// sendFails checks that a send is not acknowledged within a few seconds:
// shard 0 has no leader.
func (r *rig) sendFails() {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if res, err := r.cl.Send(ctx, damageQueue, []byte("must-not-be-acknowledged"), client.DedupKey(r.run+"-no-leader")); err == nil {
		r.t.Fatalf("a send was acknowledged (%s) while shard 0 can have no leader", res.ID)
	}
}

// A node whose whole data directory is gone comes back under its old id
// with no flag: it takes no part in raft until a member says the cluster
// lists it (it would otherwise vote with nothing), then it is removed from
// each group, re-added empty as a fresh replica, and catches up; nothing
// acknowledged is lost.
func TestWipedNodeRejoinsAsAFreshReplica(t *testing.T) {
	r := newRig(t)
	r.send("before", 200)
	_, victim, _ := r.roles()
	r.stop(victim, true)
	mustRemove(t, r.c.Nodes[victim].Dir)
	r.send("while-out", 50)
	from := r.logSize(victim)
	r.rejoin(victim, nil, "meta", "shard-0")
	r.waitLog(victim, from, regexp.MustCompile(`.*identity check: the cluster lists this node but its data directory has no state.*`), time.Second)
	r.send("after", 20)
	r.verifyAll()
}

// A node whose meta replica is damaged cannot run (it needs the shard
// map): it exits with the reason and what to do; with --repair its meta
// replica is moved aside, removed from the meta group and re-added empty.
func TestDamagedMetaReplicaStopsTheNodeUntilRepaired(t *testing.T) {
	r := newRig(t)
	r.send("before", 100)
	_, victim, _ := r.roles()
	r.stop(victim, false)
	mustRemove(t, filepath.Join(diskfault.MetaDir(r.c.Nodes[victim].Dir), "raft.db"))
	r.expectExit(victim, "cannot run without its meta replica: start it with --repair", "replica meta", "stable store")
	r.send("while-out", 50)
	r.rejoinWithRepair(victim, "meta")
	r.send("after", 20)
	r.verifyAll()
	if aside, _ := filepath.Glob(diskfault.MetaDir(r.c.Nodes[victim].Dir) + ".damaged-*"); len(aside) != 1 {
		t.Fatalf("the damaged meta replica was not kept aside: %v", aside)
	}
}

// expectExit restarts node i and checks that it exits with a failure and
// a log that says each of says.
func (r *rig) expectExit(i int, says ...string) {
	r.t.Helper()
	from := r.logSize(i)
	r.c.Restart(i)
	select {
	case <-r.c.Exited(i):
	case <-time.After(60 * time.Second):
		r.t.Fatalf("%s kept running", r.c.Nodes[i].ID)
	}
	if r.c.ExitErr(i) == nil {
		r.t.Fatalf("%s exited with status 0", r.c.Nodes[i].ID)
	}
	log := r.logSince(i, from)
	var last string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "raftq-node:") {
			last = line
		}
	}
	for _, s := range says {
		if !strings.Contains(last, s) {
			r.t.Fatalf("%s's exit message lacks %q:\n%s", r.c.Nodes[i].ID, s, last)
		}
	}
	r.t.Logf("%s exited: %v\n%s", r.c.Nodes[i].ID, r.c.ExitErr(i), last)
}

// rejoinWithRepair starts node i with --repair and waits until each of
// groups has rejoined with a vote.
func (r *rig) rejoinWithRepair(i int, groups ...string) {
	r.t.Helper()
	r.rejoin(i, []string{"--repair"}, groups...)
}

// rejoin starts node i with args and waits until each of groups has
// rejoined with a vote.
func (r *rig) rejoin(i int, args []string, groups ...string) {
	r.t.Helper()
	from := r.logSize(i)
	r.c.RestartArgs(i, args...)
	r.waitServing(i)
	for _, g := range groups {
		r.waitLog(i, from, regexp.MustCompile(fmt.Sprintf(`.*replica rejoined its group.*group=%s .*voter=true.*`, regexp.QuoteMeta(g))), 60*time.Second)
	}
	if _, err := os.Stat(r.c.Nodes[i].Dir); err != nil {
		r.t.Fatalf("data dir: %v", err)
	}
}
