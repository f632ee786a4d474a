package shard

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/raftgroup"
)

// looks collects the snapshot scheduler's looks of a test cluster.
type looks struct {
	mu  sync.Mutex
	all []raftgroup.SnapshotLook
}

func (l *looks) add(x raftgroup.SnapshotLook) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = append(l.all, x)
}

// since returns the looks made after t.
func (l *looks) since(t time.Time) []raftgroup.SnapshotLook {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []raftgroup.SnapshotLook
	for _, x := range l.all {
		if x.At.After(t) {
			out = append(out, x)
		}
	}
	return out
}

// waitLooks polls until cond holds over the looks made after t.
func (l *looks) wait(t *testing.T, what string, after time.Time, cond func([]raftgroup.SnapshotLook) bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond(l.since(after)) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The size rule in a real group: after a snapshot of a large state, many
// small entries do not bring the next one however often the scheduler
// looks, a log as large as the snapshot does.
func TestSnapshotWaitsForALogAsLargeAsItself(t *testing.T) {
	tun := fastTuning()
	tun.SnapshotThreshold = 4
	// One voter: its slot is always open. A look every 500 ms, and the
	// age rule (10 intervals) far beyond the test.
	tun.SnapshotInterval = 4 * time.Second
	seen := &looks{}
	tun.OnSnapshotLook = seen.add
	c := newCluster(t, 1, true, tun)
	sh := c.leader().sh
	mustQueue(t, sh, "q", &fsmpb.QueuePolicy{Mode: fsmpb.QueueMode_QUEUE_MODE_STANDARD, DedupWindowMs: 600_000})
	big := make([]byte, 64<<10)
	for i := range 16 { // a 1 MiB state
		mustEnqueue(t, sh, "q", &fsmpb.NewMessage{Body: big, DedupKey: fmt.Sprintf("big%d", i)})
	}
	if err := sh.Raft().Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		t.Fatal(err)
	}
	snapIndex := func() string { return sh.Raft().Stats()["last_snapshot_index"] }
	first := snapIndex()

	for i := range 40 { // ten times the threshold in entries, a few KB
		mustEnqueue(t, sh, "q", &fsmpb.NewMessage{Body: []byte("s"), DedupKey: fmt.Sprintf("small%d", i)})
	}
	small := time.Now()
	seen.wait(t, "four looks at the small log", small, func(ls []raftgroup.SnapshotLook) bool {
		judged := 0
		for _, l := range ls {
			if l.InSlot {
				judged++
			}
		}
		return judged >= 4
	})
	for _, l := range seen.since(small) {
		if l.Due || l.Began {
			t.Fatalf("a look judged a log far smaller than the last snapshot due: %+v", l)
		}
	}
	if got := snapIndex(); got != first {
		t.Fatalf("a snapshot at index %s after a log far smaller than the last snapshot (at %s)", got, first)
	}

	for i := range 20 { // more log than the snapshot holds
		mustEnqueue(t, sh, "q", &fsmpb.NewMessage{Body: big, DedupKey: fmt.Sprintf("more%d", i)})
	}
	large := time.Now()
	seen.wait(t, "a snapshot after a log larger than the last snapshot", large, func(ls []raftgroup.SnapshotLook) bool {
		for _, l := range ls {
			if l.Began && l.Err == nil {
				return true
			}
		}
		return false
	})
	if got := snapIndex(); got == first {
		t.Fatalf("the scheduler took a snapshot, but the last snapshot is still at %s", first)
	}
}

// In a real group each replica starts its snapshots only in its own slot:
// the first half of its turn among the voters sorted by ID. The test
// watches the scheduler's looks, not the snapshots' file times, which a
// loaded machine can make late.
func TestReplicasSnapshotInTurn(t *testing.T) {
	tun := fastTuning()
	tun.SnapshotThreshold = 8
	tun.SnapshotInterval = 3 * time.Second // three 1 s slots
	seen := &looks{}
	tun.OnSnapshotLook = seen.add
	c := newCluster(t, 3, true, tun)
	mustQueue(t, c.leader().sh, "q", &fsmpb.QueuePolicy{Mode: fsmpb.QueueMode_QUEUE_MODE_STANDARD, DedupWindowMs: 600_000})
	began := time.Now()
	snapshotted := func() map[raft.ServerID]int {
		out := map[raft.ServerID]int{}
		for _, l := range seen.since(began) {
			if l.Began && l.Err == nil {
				out[l.Self]++
			}
		}
		return out
	}
	deadline := time.Now().Add(2 * time.Minute)
	for i := 0; len(snapshotted()) < len(c.nodes); i++ {
		if time.Now().After(deadline) {
			t.Fatalf("not every replica took a snapshot under load: %v", snapshotted())
		}
		c.mustEnqueueAnywhere("q", fmt.Sprintf("m%d", i), make([]byte, 512))
	}
	for pos, nd := range c.nodes { // n1, n2, n3: IDs sort in this order
		for _, l := range seen.since(began) {
			if l.Self != raft.ServerID(nd.id) || !l.Began {
				continue
			}
			if l.Pos != pos || l.N != 3 {
				t.Errorf("%s judged itself voter %d of %d, want %d of 3", nd.id, l.Pos, l.N, pos)
				continue
			}
			// Its start window: the first half of its slot, in a period
			// of one slot per voter.
			off := time.Duration(l.At.UnixNano() % int64(3*l.Slot))
			if lo, hi := time.Duration(pos)*l.Slot, time.Duration(pos)*l.Slot+l.Slot/2; off < lo || off >= hi {
				t.Errorf("%s (slot %d of %v) started a snapshot %v into a %v period, outside [%v, %v)", nd.id, pos, l.Slot, off, 3*l.Slot, lo, hi)
			}
		}
	}
	t.Logf("snapshots per replica: %v", snapshotted())
}

// LastSnapshot reports what the replica's latest snapshot covers, for
// cluster status: nothing before the first, then the index and term of the
// applied log it was taken at.
func TestLastSnapshotReportsTheLatest(t *testing.T) {
	c := newCluster(t, 1, true, fastTuning())
	sh := c.leader().sh
	if i, term := sh.LastSnapshot(); i != 0 || term != 0 {
		t.Fatalf("before any snapshot: %d/%d", i, term)
	}
	mustQueue(t, sh, "q", &fsmpb.QueuePolicy{Mode: fsmpb.QueueMode_QUEUE_MODE_STANDARD})
	mustEnqueue(t, sh, "q", &fsmpb.NewMessage{Body: []byte("x")})
	if err := sh.Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	i, term := sh.LastSnapshot()
	if info := sh.Info(); i == 0 || i > info.AppliedIndex || term != info.Term {
		t.Fatalf("after a snapshot: %d/%d, applied %d term %d", i, term, info.AppliedIndex, info.Term)
	}
}
