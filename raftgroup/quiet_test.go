package raftgroup

import (
	"io"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftq/raftq/raftmux"
	"github.com/raftq/raftq/raftstore"
)

// countFSM counts applied entries.
type countFSM struct{ n atomic.Uint64 }

func (f *countFSM) Apply(*raft.Log) any                 { f.n.Add(1); return nil }
func (f *countFSM) Snapshot() (raft.FSMSnapshot, error) { return countSnap{}, nil }
func (f *countFSM) Restore(rc io.ReadCloser) error      { return rc.Close() }

type countSnap struct{}

func (countSnap) Persist(s raft.SnapshotSink) error { return s.Close() }
func (countSnap) Release()                          {}

type quietReplica struct {
	g   *Group
	mux *raftmux.Mux
}

// quietCluster starts a 3-voter group over real TCP, one raftmux per
// replica as on real nodes (so quiet heartbeats are coalesced), whose
// replicas share one Quiescer (as the groups of one node do; here the
// nodes are one process).
func quietCluster(t *testing.T, tun RaftTuning) []*quietReplica {
	t.Helper()
	tun.Quiet = NewQuiescer(50*time.Millisecond, testLogger())
	ids := []string{"a", "b", "c"}
	var reps []*quietReplica
	var servers []raft.Server
	for _, id := range ids {
		m, err := raftmux.Listen("127.0.0.1:0", "", testLogger())
		if err != nil {
			t.Fatal(err)
		}
		reps = append(reps, &quietReplica{mux: m})
		servers = append(servers, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(m.Addr())})
	}
	for i, id := range ids {
		tr, err := reps[i].mux.Transport("quiet-test", raftmux.TransportOptions{})
		if err != nil {
			t.Fatal(err)
		}
		g, err := OpenRaft(RaftOptions{NodeID: id, Group: "quiet-test", Dir: t.TempDir(), Transport: tr,
			Bootstrap: servers, Logger: testLogger(), Tuning: tun}, &countFSM{})
		if err != nil {
			t.Fatal(err)
		}
		reps[i].g = g
	}
	t.Cleanup(func() {
		for _, r := range reps {
			r.stop()
		}
	})
	return reps
}

func (r *quietReplica) stop() {
	if r.g == nil {
		return
	}
	_ = r.g.Raft.Shutdown().Error()
	_ = r.mux.Close()
	_ = r.g.Close()
	r.g = nil
}

func leaderOf(t *testing.T, reps []*quietReplica, within time.Duration) *quietReplica {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		for _, r := range reps {
			if r.g != nil && r.g.Raft.State() == raft.Leader {
				return r
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no leader within %s", within)
	return nil
}

// waitQuiet waits until every live replica runs with the quiet heartbeat
// timeout (want true) or the awake one (want false).
func waitQuiet(t *testing.T, reps []*quietReplica, tun RaftTuning, want bool) {
	t.Helper()
	tun = tun.WithDefaults()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		all := true
		for _, r := range reps {
			if r.g != nil && (r.g.Raft.ReloadableConfig().HeartbeatTimeout == tun.QuietHeartbeat) != want {
				all = false
			}
		}
		if all {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("replicas not quiet=%v within 5 s", want)
}

// A quiet group accepts a write without waiting for a heartbeat: the quiet
// leader heartbeats 150 to 300 ms apart (plus up to raftmux.BeatWindow),
// and each write here must take a fraction of that. The group wakes after
// the write and quiets again.
func TestQuiet_WriteDoesNotWaitForHeartbeat(t *testing.T) {
	tun := RaftTuning{
		HeartbeatTimeout: 500 * time.Millisecond, ElectionTimeout: 500 * time.Millisecond,
		LeaderLeaseTimeout: 500 * time.Millisecond, CommitTimeout: 2 * time.Second,
		QuietAfter: 300 * time.Millisecond, QuietHeartbeat: 1500 * time.Millisecond,
	}
	reps := quietCluster(t, tun)
	leader := leaderOf(t, reps, 5*time.Second)
	if err := leader.g.Raft.Barrier(5 * time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	var took []time.Duration
	for range 5 {
		waitQuiet(t, reps, tun, true)
		began := time.Now()
		if err := leader.g.Raft.ApplyLog(raftstore.Command([]byte("x")), 5*time.Second).Error(); err != nil {
			t.Fatal(err)
		}
		took = append(took, time.Since(began))
		waitQuiet(t, reps[:1], tun, false) // wakes on the write...
		if reps[0] != leader {
			waitQuiet(t, []*quietReplica{leader}, tun, false)
		}
	}
	slices.Sort(took)
	if med := took[len(took)/2]; med > 100*time.Millisecond {
		t.Fatalf("writes to a quiet group took %v (median %v); a heartbeat-bound write takes 150 ms or more", took, med)
	}
}

// Killing the leader of a quiet group wakes a follower long before its own
// quiet raft would notice: the Quiescer wakes a quiet follower that heard
// nothing for 2 × (QuietHeartbeat/5 + raftmux.BeatWindow) (1.25 s here)
// plus a random part of HeartbeatTimeout (up to 1 s; it looks every
// 50 ms), and raft, given the awake timeout again, campaigns at once.
// Without that watch a quiet follower would wait QuietHeartbeat to
// 2 × QuietHeartbeat (3-6 s here). The bound is on the wake, not on the
// election that follows: a split vote may add an ElectionTimeout to
// 2 × ElectionTimeout, which is raft's and not what this test is about.
func TestQuiet_FailoverWithinBound(t *testing.T) {
	tun := RaftTuning{
		HeartbeatTimeout: time.Second, ElectionTimeout: time.Second, LeaderLeaseTimeout: time.Second,
		QuietAfter: 300 * time.Millisecond, QuietHeartbeat: 3 * time.Second,
	}
	quietHB := tun.WithDefaults().QuietHeartbeat
	reps := quietCluster(t, tun)
	leader := leaderOf(t, reps, 5*time.Second)
	if err := leader.g.Raft.ApplyLog(raftstore.Command([]byte("x")), 5*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	waitQuiet(t, reps, tun, true)
	time.Sleep(500 * time.Millisecond) // quiet for a while: no leader lost its lease
	if l := leaderOf(t, reps, time.Second); l != leader {
		t.Fatal("leadership changed while the group was quiet")
	}

	began := time.Now()
	leader.stop()
	// 1.25 s + up to 1 s + a look: 2.3 s; a quiet raft waits 3 s at the
	// least. The margin between is for a loaded machine.
	const bound = 2900 * time.Millisecond
	var woke time.Duration
	for woke == 0 && time.Since(began) < 10*time.Second {
		for _, r := range reps {
			if r != leader && r.g != nil && r.g.Raft.ReloadableConfig().HeartbeatTimeout != quietHB {
				woke = time.Since(began)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if woke == 0 || woke > bound {
		t.Fatalf("a follower woke after %v (0: not in 10 s); bound %v", woke, bound)
	}
	next := leaderOf(t, reps, 10*time.Second)
	if err := next.g.Raft.ApplyLog(raftstore.Command([]byte("y")), 5*time.Second).Error(); err != nil {
		t.Fatalf("write to the new leader: %v", err)
	}
	t.Logf("quiet follower woke in %v, new leader after %v", woke, time.Since(began))
}
