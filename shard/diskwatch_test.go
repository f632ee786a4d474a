package shard

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/raftgroup"
)

// A leader whose log append stops completing holds back all its raft
// traffic once the append is StallAfter late, so the others elect a leader
// that can write and the group keeps committing; when the append finally
// completes the replica resumes as a follower, and every acknowledged
// enqueue is on every replica.
func TestStalledLeaderIsReplacedAndResumes(t *testing.T) {
	fatal := make(chan error, 1)
	c := newCluster(t, 3, false, fastTuning(), withDiskFaults(raftgroup.DiskOptions{
		StallAfter: 300 * time.Millisecond,
		OnFatal:    func(err error) { fatal <- err },
	}))
	old := c.leader()
	mustQueue(t, old.sh, "q", standard(time.Minute))

	var (
		acked atomic.Int64
		stop  = make(chan struct{})
		wg    sync.WaitGroup
	)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				c.mustEnqueueAnywhere("q", fmt.Sprintf("w%d-%d", w, i), []byte("x"))
				acked.Add(1)
			}
		}()
	}
	waitFor(t, 10*time.Second, "first acks", func() bool { return acked.Load() > 20 })

	release := old.disk.stall()
	defer release()
	start := time.Now()
	waitFor(t, 10*time.Second, "the leader's append to block", func() bool { return old.disk.blocked.Load() > 0 })
	var next *node
	waitFor(t, 15*time.Second, "another replica to lead", func() bool {
		for _, nd := range c.followers(old) {
			if nd.sh.IsLeader() {
				next = nd
				return true
			}
		}
		return false
	})
	t.Logf("leadership moved %s -> %s %v after the disk stalled", old.id, next.id, time.Since(start).Round(time.Millisecond))
	if !slices.Contains(old.sh.Sidelines(), reasonLogStall) || !old.sh.DiskStats().Stalled {
		t.Fatalf("stalled leader: sidelines %v, stats %+v", old.sh.Sidelines(), old.sh.DiskStats())
	}
	if old.sh.IsLeader() {
		t.Fatal("the stalled replica still reports itself a ready leader")
	}
	during := acked.Load()
	waitFor(t, 15*time.Second, "acks under the new leader", func() bool { return acked.Load() > during+20 })

	release()
	waitFor(t, 15*time.Second, "the stalled replica to resume", func() bool {
		st := old.sh.DiskStats()
		return len(old.sh.Sidelines()) == 0 && !st.Stalled && st.Stalls == 1
	})
	close(stop)
	wg.Wait()
	c.converge()
	want := uint64(acked.Load())
	for _, nd := range c.live() {
		if st, _ := nd.sh.FSM().Stats("q"); st.Ready != want {
			t.Errorf("%s holds %d messages, %d were acknowledged", nd.id, st.Ready, want)
		}
	}
	select {
	case err := <-fatal:
		t.Fatalf("a stall is not fatal, got OnFatal(%v)", err)
	default:
	}
}

// An append refused for lack of space answers the proposal as certainly
// not applied, the leader steps down and stays out of elections until its
// directory has room, and then takes part again.
func TestNoSpaceLeaderStepsDownUntilSpaceIsBack(t *testing.T) {
	c := newCluster(t, 3, true, fastTuning(), withDiskFaults(raftgroup.DiskOptions{
		OnFatal: func(err error) { t.Errorf("no space is not fatal, got OnFatal(%v)", err) },
	}))
	old := c.leader()
	mustQueue(t, old.sh, "q", standard(time.Minute))

	old.disk.free.Store(0)
	old.disk.failAppends(&fs.PathError{Op: "write", Path: old.dir + "/wal/seg", Err: syscall.ENOSPC})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, err := old.sh.Propose(ctx, enqueueCmd("q", &fsmpb.NewMessage{Body: []byte("refused"), DedupKey: "refused"}))
	cancel()
	if !errors.Is(err, raftgroup.ErrNotLeader) {
		t.Fatalf("propose on a leader whose disk is full: %v, want a raftgroup.NotLeaderError (certainly not applied)", err)
	}
	waitFor(t, 10*time.Second, "the full replica to sideline itself", func() bool {
		return slices.Contains(old.sh.Sidelines(), reasonDiskFull) && old.sh.DiskStats().Full
	})
	next := c.leader()
	if next == old {
		t.Fatal("the replica whose disk is full leads again")
	}
	mustEnqueue(t, next.sh, "q", &fsmpb.NewMessage{Body: []byte("elsewhere")})

	old.disk.failAppends(nil)
	old.disk.free.Store(1 << 40)
	waitFor(t, 10*time.Second, "the replica to take part again once space is back", func() bool {
		st := old.sh.DiskStats()
		return len(old.sh.Sidelines()) == 0 && !st.Full && st.FullEpisodes == 1
	})
	c.converge()
	for _, nd := range c.live() {
		if st, _ := nd.sh.FSM().Stats("q"); st.Ready != 1 {
			t.Errorf("%s holds %d messages, want only the one acknowledged", nd.id, st.Ready)
		}
	}
}

// An fsync error is fatal: OnFatal gets a *raftgroup.DiskError naming the directory
// and the cause, once, and the enqueue whose append failed is neither
// acknowledged nor applied anywhere.
func TestFsyncErrorIsFatalAndNothingIsAcknowledged(t *testing.T) {
	fatal := make(chan error, 4)
	c := newCluster(t, 3, true, fastTuning(), withDiskFaults(raftgroup.DiskOptions{OnFatal: func(err error) { fatal <- err }}))
	old := c.leader()
	mustQueue(t, old.sh, "q", standard(time.Minute))
	mustEnqueue(t, old.sh, "q", &fsmpb.NewMessage{Body: []byte("before")})

	old.disk.failAppends(&fs.PathError{Op: "sync", Path: old.dir + "/wal/seg", Err: syscall.EIO})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	res, err := old.sh.Propose(ctx, enqueueCmd("q", &fsmpb.NewMessage{Body: []byte("lost")}))
	cancel()
	if err == nil {
		t.Fatalf("an enqueue whose append failed was acknowledged: %v", res)
	}
	var de *raftgroup.DiskError
	select {
	case got := <-fatal:
		if !errors.As(got, &de) || de.Kind != raftgroup.DiskFatal || de.Op != "append" || de.Dir != old.dir || !errors.Is(got, syscall.EIO) {
			t.Fatalf("OnFatal(%v), want a fatal append raftgroup.DiskError in %s wrapping EIO", got, old.dir)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("OnFatal was not called")
	}
	// The replica is as good as gone: a process would have exited. A new
	// leader commits in its term, so what the old one committed applies.
	c.kill(old)
	c.leader()
	c.converge()
	for _, nd := range c.live() {
		if st, _ := nd.sh.FSM().Stats("q"); st.Ready != 1 {
			t.Errorf("%s holds %d messages, want only the acknowledged one", nd.id, st.Ready)
		}
	}
	select {
	case got := <-fatal:
		t.Fatalf("OnFatal called twice (second: %v)", got)
	default:
	}
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A stalled leader asks a follower to take over (TimeoutNow past its own
// gate) rather than leave the followers to notice its silence: with a
// 10 s heartbeat timeout, another replica leads long before they would
// have timed out.
func TestStalledLeaderHandsOverBeforeFollowersTimeOut(t *testing.T) {
	tun := fastTuning()
	tun.HeartbeatTimeout, tun.ElectionTimeout = 10*time.Second, 10*time.Second
	c := newCluster(t, 3, false, tun, withDiskFaults(raftgroup.DiskOptions{StallAfter: 300 * time.Millisecond}))
	// The first election waits out a 10-20 s randomized timeout.
	old := c.leaderWithin(60 * time.Second)
	mustQueue(t, old.sh, "q", standard(time.Minute))
	release := old.disk.stall()
	defer release()
	start := time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = old.sh.Propose(ctx, enqueueCmd("q", &fsmpb.NewMessage{Body: []byte("stuck")}))
	}()
	waitFor(t, 8*time.Second, "another replica to lead before the followers' 10 s timeout", func() bool {
		for _, nd := range c.followers(old) {
			if nd.sh.IsLeader() {
				return true
			}
		}
		return false
	})
	t.Logf("another replica leads %v after the stall began", time.Since(start).Round(time.Millisecond))
	release()
}
