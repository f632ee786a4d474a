package shard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/raftgroup"
)

func standard(visibility time.Duration) *fsmpb.QueuePolicy {
	return &fsmpb.QueuePolicy{Mode: fsmpb.QueueMode_QUEUE_MODE_STANDARD, VisibilityTimeoutMs: visibility.Milliseconds()}
}

func TestFollowerProposeReturnsNotLeaderWithHint(t *testing.T) {
	c := newCluster(t, 3, true, fastTuning())
	leader := c.leader()
	mustQueue(t, leader.sh, "q", standard(time.Minute))
	for _, f := range c.followers(leader) {
		// A follower learns the leader from its first AppendEntries of the
		// term; one that has not heard yet rightly answers "unknown".
		deadline := time.Now().Add(5 * time.Second)
		for id, _ := f.sh.Leader(); string(id) != leader.id; id, _ = f.sh.Leader() {
			if time.Now().After(deadline) {
				t.Fatalf("%s never learned the leader", f.id)
			}
			time.Sleep(10 * time.Millisecond)
		}
		_, err := f.sh.Propose(context.Background(), enqueueCmd("q", &fsmpb.NewMessage{Body: []byte("x")}))
		var nl *raftgroup.NotLeaderError
		if !errors.As(err, &nl) || !errors.Is(err, raftgroup.ErrNotLeader) {
			t.Fatalf("%s: err = %v, want raftgroup.NotLeaderError", f.id, err)
		}
		if nl.LeaderID != leader.id || nl.LeaderAddr != string(leader.addr) {
			t.Fatalf("%s: hint = %+v, want %s at %s", f.id, nl, leader.id, leader.addr)
		}
		if f.sh.IsLeader() {
			t.Fatalf("%s: follower says IsLeader", f.id)
		}
		if _, err := pollClaim(context.Background(), f.sh, &fsmpb.Receive{Queue: "q", Max: 1}, time.Second); !errors.Is(err, raftgroup.ErrNotLeader) {
			t.Fatalf("%s: follower Receive err = %v, want raftgroup.ErrNotLeader", f.id, err)
		}
	}
	if info := leader.sh.Info(); info.State != raft.Leader || !info.Ready || info.LeaderID != leader.id {
		t.Fatalf("leader info = %+v", info)
	}
}

func TestProposeHonoursCancelledContext(t *testing.T) {
	c := newCluster(t, 1, true, fastTuning())
	leader := c.leader()
	mustQueue(t, leader.sh, "q", standard(time.Minute))
	before := leader.sh.ProposerStats().Commands
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := leader.sh.Propose(ctx, enqueueCmd("q", &fsmpb.NewMessage{Body: []byte("x")})); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if got := leader.sh.ProposerStats().Commands; got != before {
		t.Fatalf("a cancelled proposal reached raft: commands %d -> %d", before, got)
	}
	if st, _ := leader.sh.FSM().Stats("q"); st.Ready != 0 {
		t.Fatalf("ready = %d after a cancelled enqueue", st.Ready)
	}
}

func TestGroupCommitCoalesces(t *testing.T) {
	c := newCluster(t, 3, true, fastTuning())
	leader := c.leader()
	mustQueue(t, leader.sh, "q", standard(time.Minute))
	before, lastBefore := leader.sh.ProposerStats(), leader.sh.Raft().LastIndex()

	const workers, each = 64, 20
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				res, err := leader.sh.Propose(context.Background(), enqueueCmd("q", &fsmpb.NewMessage{Body: fmt.Appendf(nil, "%d-%d", w, i)}))
				if err != nil || len(res.GetEnqueue().GetItems()) != 1 {
					errs <- fmt.Errorf("worker %d: %v %v", w, res, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	after := leader.sh.ProposerStats()
	cmds, entries := after.Commands-before.Commands, after.Entries-before.Entries
	logEntries := leader.sh.Raft().LastIndex() - lastBefore
	t.Logf("%d commands in %d proposer entries, %d raft log entries", cmds, entries, logEntries)
	if cmds < workers*each {
		t.Fatalf("commands = %d, want >= %d", cmds, workers*each)
	}
	// 64 concurrent callers must share entries: demand at least 4 per entry
	// on average (typical runs reach far more).
	if logEntries*4 > workers*each {
		t.Fatalf("%d raft log entries for %d commands: group commit did not coalesce", logEntries, workers*each)
	}
	if st, _ := leader.sh.FSM().Stats("q"); st.Ready != workers*each {
		t.Fatalf("ready = %d, want %d", st.Ready, workers*each)
	}
	c.converge()
}

func TestLongPollWakesOnEnqueueWithoutSpinning(t *testing.T) {
	c := newCluster(t, 3, true, fastTuning())
	leader := c.leader()
	mustQueue(t, leader.sh, "q", standard(time.Minute))

	type got struct {
		res *fsmpb.Result
		err error
		at  time.Time
	}
	done := make(chan got, 1)
	go func() {
		// 30 s: a long poll not woken by the enqueue returns only then,
		// far beyond the bounds below.
		res, err := pollClaim(context.Background(), leader.sh, &fsmpb.Receive{Queue: "q", Max: 10}, 30*time.Second)
		done <- got{res, err, time.Now()}
	}()
	time.Sleep(100 * time.Millisecond) // let the first (empty) receive apply
	idleStart := leader.sh.ProposerStats().Commands
	time.Sleep(700 * time.Millisecond)
	if idle := leader.sh.ProposerStats().Commands - idleStart; idle > 1 {
		t.Fatalf("%d commands proposed while the long poll waited: it spins", idle)
	}
	sent := time.Now()
	id := mustEnqueue(t, leader.sh, "q", &fsmpb.NewMessage{Body: []byte("hello")})
	select {
	case g := <-done:
		if g.err != nil {
			t.Fatal(g.err)
		}
		msgs := g.res.GetReceive().GetMessages()
		if len(msgs) != 1 || msgs[0].GetId() != id {
			t.Fatalf("received %v, want message %d", msgs, id)
		}
		// Two raft commits (the enqueue, then the receive); 4 s leaves room
		// for a loaded machine and is still far below the 30 s wait.
		if lat := g.at.Sub(sent); lat > 4*time.Second {
			t.Fatalf("long poll woke %v after the enqueue", lat)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("long poll did not wake on enqueue")
	}

	// An empty wait ends on time with an empty, successful result.
	start := time.Now()
	res, err := pollClaim(context.Background(), leader.sh, &fsmpb.Receive{Queue: "q", Max: 1}, 300*time.Millisecond)
	if err != nil || len(res.GetReceive().GetMessages()) != 0 {
		t.Fatalf("empty long poll = %v, %v", res, err)
	}
	// The wait's timer cannot fire early; 10 s only catches a wait that
	// does not end on time, with room for a loaded machine.
	if d := time.Since(start); d < 250*time.Millisecond || d > 10*time.Second {
		t.Fatalf("empty long poll took %v, want about 300 ms", d)
	}
}

func TestDelayedMessageDeliveredByLeaderTick(t *testing.T) {
	c := newCluster(t, 3, true, fastTuning())
	leader := c.leader()
	mustQueue(t, leader.sh, "q", standard(time.Minute))
	id := mustEnqueue(t, leader.sh, "q", &fsmpb.NewMessage{Body: []byte("later"), DelayMs: 400})
	start := time.Now()
	res, err := pollClaim(context.Background(), leader.sh, &fsmpb.Receive{Queue: "q", Max: 1}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	msgs := res.GetReceive().GetMessages()
	if len(msgs) != 1 || msgs[0].GetId() != id {
		t.Fatalf("received %v, want delayed message %d", msgs, id)
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > 5*time.Second {
		t.Fatalf("delayed message arrived after %v, want about 400 ms", d)
	}
	// Idle, nothing due: the timer must not propose ticks.
	ticks := leader.sh.ProposerStats().Ticks
	time.Sleep(1500 * time.Millisecond)
	if n := leader.sh.ProposerStats().Ticks - ticks; n > 1 {
		t.Fatalf("%d ticks proposed while nothing was due", n)
	}
}

func TestLaggingFollowerCatchesUpViaSnapshot(t *testing.T) {
	for _, store := range []string{raftgroup.LogStoreWAL, raftgroup.LogStoreBolt} {
		t.Run(store, func(t *testing.T) { testLaggingFollowerCatchesUpViaSnapshot(t, store) })
	}
}

func testLaggingFollowerCatchesUpViaSnapshot(t *testing.T, store string) {
	tun := fastTuning()
	tun.TrailingLogs = 16
	tun.SnapshotThreshold = 32
	tun.LogStore = store
	// Compaction frees whole wal segments only; small ones make the
	// leader's log really start after what the follower missed.
	tun.WALSegmentBytes = 8 << 10
	c := newCluster(t, 3, true, tun)
	leader := c.leader()
	mustQueue(t, leader.sh, "q", &fsmpb.QueuePolicy{Mode: fsmpb.QueueMode_QUEUE_MODE_STANDARD, DedupWindowMs: 600_000})
	lag := c.followers(leader)[0]
	c.partition(lag)

	n := 200
	if testing.Short() {
		n = 100
	}
	for i := range n {
		c.mustEnqueueAnywhere("q", fmt.Sprintf("m%d", i), fmt.Appendf(nil, "m%d", i))
	}
	// Every replica but the lagging one compacts its log, so whichever
	// leads after the heal (leadership can move on a loaded machine) has
	// dropped what the follower missed. Nothing new to snapshot means the
	// scheduler has just taken one, which compacted as well.
	for _, nd := range c.nodes {
		if nd == lag {
			continue
		}
		if err := nd.sh.Raft().Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
			t.Fatalf("%s snapshot: %v", nd.id, err)
		}
	}
	c.heal(lag)
	c.converge()
	if st, _ := lag.sh.FSM().Stats("q"); st.Ready != uint64(n) {
		t.Fatalf("lagging follower has %d ready, want %d", st.Ready, n)
	}
	// raft records the installed snapshot only after the FSM restore
	// returns, so the digests can agree a moment before the stat moves.
	deadline := time.Now().Add(10 * time.Second)
	for {
		idx := lag.sh.Raft().Stats()["last_snapshot_index"]
		if idx != "0" && idx != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lagging follower did not install a snapshot (last_snapshot_index %q)", idx)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestGracefulShutdownTransfersLeadership(t *testing.T) {
	c := newCluster(t, 3, true, fastTuning())
	leader := c.leader()
	var subs []<-chan bool
	for _, nd := range c.nodes {
		ch, cancel := nd.sh.Subscribe()
		t.Cleanup(cancel)
		subs = append(subs, ch)
	}
	mustQueue(t, leader.sh, "q", standard(time.Minute))
	id := mustEnqueue(t, leader.sh, "q", &fsmpb.NewMessage{Body: []byte("x")})

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	old := leader.sh
	c.mu.Lock()
	leader.sh = nil
	c.mu.Unlock()
	if err := old.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	next := c.leader()
	t.Logf("new leader %s ready %v after shutdown began", next.id, time.Since(start))
	if _, ok := next.sh.FSM().Message(id); !ok {
		t.Fatalf("message %d missing on the new leader", id)
	}
	if _, err := old.Propose(context.Background(), enqueueCmd("q")); !errors.Is(err, ErrShutdown) {
		t.Fatalf("propose after shutdown: %v, want ErrShutdown", err)
	}
	// The new leader's subscription reports true (latest value wins).
	for i, nd := range c.nodes {
		if nd != next {
			continue
		}
		deadline := time.After(5 * time.Second)
		for v := false; !v; {
			select {
			case v = <-subs[i]:
			case <-deadline:
				t.Fatalf("%s subscription never reported leadership", nd.id)
			}
		}
	}
}
