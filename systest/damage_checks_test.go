package systest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftq/raftq/peer/peerpb"
)

// What the damage tests check on a running rig: node logs, the operator
// CLI, elections, repair.

// logSize is where node i's log ends now: waitLog reads after it.
func (r *rig) logSize(i int) int64 {
	fi, err := os.Stat(r.c.Nodes[i].LogPath)
	if err != nil {
		r.t.Fatalf("stat log: %v", err)
	}
	return fi.Size()
}

// logSince is node i's log after offset.
func (r *rig) logSince(i int, offset int64) string {
	b, err := os.ReadFile(r.c.Nodes[i].LogPath)
	if err != nil {
		r.t.Fatalf("read log: %v", err)
	}
	if int64(len(b)) < offset {
		return ""
	}
	return string(b[offset:])
}

// waitLog waits until node i's log after offset has a line matching re
// and returns it.
func (r *rig) waitLog(i int, offset int64, re *regexp.Regexp, d time.Duration) string {
	r.t.Helper()
	deadline := time.Now().Add(d)
	for {
		if m := re.FindString(r.logSince(i, offset)); m != "" {
			return m
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s never logged %q within %v", r.c.Nodes[i].ID, re, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// countLines counts node i's log lines after offset that contain every
// one of parts.
func (r *rig) countLines(i int, offset int64, parts ...string) int {
	n := 0
	for _, line := range strings.Split(r.logSince(i, offset), "\n") {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(line, p)
		}
		if ok {
			n++
		}
	}
	return n
}

// cli runs the operator CLI against the given nodes and returns its
// output; it fails the test if the CLI fails.
func (r *rig) cli(nodes []int, args ...string) string {
	r.t.Helper()
	var addrs []string
	for _, i := range nodes {
		addrs = append(addrs, r.c.Nodes[i].GRPC)
	}
	ctx := ctxT(r.t, 60*time.Second)
	cmd := exec.CommandContext(ctx, cliBin, append([]string{"--addr", strings.Join(addrs, ",")}, args...)...)
	out, err := cmd.CombinedOutput()
	// `cluster status` exits 3 while a shard has no leader, which these
	// tests cause on purpose; its output is what they check.
	var ee *exec.ExitError
	notReady := errors.As(err, &ee) && ee.ExitCode() == 3 && len(args) >= 2 && args[0] == "cluster" && args[1] == "status"
	if err != nil && !notReady {
		r.t.Fatalf("raftq %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// expectDamaged checks that node i found its shard 0 replica damaged for
// reason: its log says so and what to do, `raftq cluster status` asked of
// it names the replica, and it serves no copy of the shard.
func (r *rig) expectDamaged(i int, logFrom int64, reason string) {
	r.t.Helper()
	id := r.c.Nodes[i].ID
	line := r.waitLog(i, logFrom, regexp.MustCompile(`.*shard replica damaged: it does not vote or serve until repaired.*`), 30*time.Second)
	for _, want := range []string{"reason=" + reason, "raftq cluster repair " + id} {
		if !strings.Contains(line, want) {
			r.t.Fatalf("%s's damage line lacks %q: %s", id, want, line)
		}
	}
	r.t.Logf("%s: %s", id, line)
	out := r.cli([]int{i}, "cluster", "status")
	want := fmt.Sprintf("DAMAGED replica shard-0 on node %s (%s)", id, reason)
	if !strings.Contains(out, want) || !strings.Contains(out, "raftq cluster repair") {
		r.t.Fatalf("raftq cluster status on %s does not name the damaged replica (want %q):\n%s", id, want, out)
	}
	_, err := peerpb.NewPeerClient(r.c.PeerConn(i)).ShardDigest(ctxT(r.t, 10*time.Second), &peerpb.ShardDigestRequest{ShardId: 0})
	if status.Code(err) != codes.NotFound {
		r.t.Fatalf("%s still holds an open replica of shard 0 (digest: %v)", id, err)
	}
}

// noLeaderWhile checks that shard 0 elects nobody while the nodes in
// running are the only ones up: it waits until candidate has started and
// lost at least three elections (raft logs each "Election timeout
// reached"), and no running node names a leader meanwhile.
func (r *rig) noLeaderWhile(candidate int, logFrom int64, running []int) {
	r.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		for _, i := range running {
			st, err := r.status(i)
			if err != nil {
				continue
			}
			for _, s := range st.GetShards() {
				if s.GetShardId() == 0 && s.GetLeaderId() != "" && slices.Contains(running, r.index(s.GetLeaderId())) {
					r.t.Fatalf("%s sees %s lead shard 0 although the only other voter up is damaged", r.c.Nodes[i].ID, s.GetLeaderId())
				}
			}
		}
		lost := r.countLines(candidate, logFrom, "Election timeout reached", "shard=0")
		if lost >= 3 {
			r.t.Logf("%s lost %d elections of shard 0; nobody leads", r.c.Nodes[candidate].ID, lost)
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s did not keep trying to lead shard 0 (%d failed elections seen)", r.c.Nodes[candidate].ID, lost)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (r *rig) index(id string) int {
	for i, n := range r.c.Nodes {
		if n.ID == id {
			return i
		}
	}
	return -1
}

// pauseShowsNoElection freezes the shard leader (SIGSTOP): the healthy
// follower then cannot win an election, because the damaged replica does
// not vote. The leader is thawed afterwards and the cluster serves again.
func (r *rig) pauseShowsNoElection(damaged int) {
	r.t.Helper()
	leader := r.shardLeader()
	if leader == damaged {
		r.t.Fatalf("the damaged replica %s leads shard 0", r.c.Nodes[damaged].ID)
	}
	healthy := 3 - leader - damaged
	from := r.logSize(healthy)
	r.c.Signal(leader, syscall.SIGSTOP)
	r.noLeaderWhile(healthy, from, []int{healthy, damaged})
	r.c.Signal(leader, syscall.SIGCONT)
	r.waitLeader()
}

// waitLeader waits until some node leads shard 0 and a send succeeds.
func (r *rig) waitLeader() {
	r.t.Helper()
	_ = r.shardLeader()
	r.probes++
	r.send(fmt.Sprintf("probe%d", r.probes), 1)
}

// repair runs `raftq cluster repair NODE` through another node and waits
// until the replica is back as a voter with the others' state.
func (r *rig) repair(i int, via int) {
	r.t.Helper()
	id := r.c.Nodes[i].ID
	from := r.logSize(i)
	out := r.cli([]int{via}, "cluster", "repair", id)
	if !strings.Contains(out, "shard-0") || !strings.Contains(out, "re-created empty") {
		r.t.Fatalf("raftq cluster repair %s:\n%s", id, out)
	}
	r.t.Logf("raftq cluster repair %s:\n%s", id, out)
	r.waitLog(i, from, regexp.MustCompile(`.*replica rejoined its group.*group=shard-0.*voter=true.*`), 60*time.Second)
	out = r.cli([]int{i}, "cluster", "status")
	if strings.Contains(out, "DAMAGED") {
		r.t.Fatalf("after repair %s still reports damage:\n%s", id, out)
	}
}
