package shard

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/raftgroup"
)

// Eight consumers long-poll one queue and one message arrives: one receive
// is proposed, not eight (seven of which could only commit empty).
func TestWaitingReceiversDoNotProposeForClaimedMessages(t *testing.T) {
	c := newCluster(t, 3, true, fastTuning())
	leader := c.leader()
	mustQueue(t, leader.sh, "q", standard(time.Minute))

	const consumers = 8
	type got struct {
		msgs []*fsmpb.Message
		err  error
	}
	done := make(chan got, consumers)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range consumers {
		go func() {
			// 30 s: the waits must outlast both messages below even on a
			// loaded machine (the test's cancel ends them).
			res, err := pollClaim(ctx, leader.sh, &fsmpb.Receive{Queue: "q", Max: 256}, 30*time.Second)
			done <- got{res.GetReceive().GetMessages(), err}
		}()
	}
	time.Sleep(200 * time.Millisecond) // all registered and waiting
	before := leader.sh.ProposerStats().Commands
	if idle := before; idle == 0 {
		t.Fatal("no commands before the receives: the queue was not created")
	}
	id := mustEnqueue(t, leader.sh, "q", &fsmpb.NewMessage{Body: []byte("one")})
	select {
	case g := <-done:
		if g.err != nil || len(g.msgs) != 1 || g.msgs[0].GetId() != id {
			t.Fatalf("first receiver got %v, %v; want message %d", g.msgs, g.err, id)
		}
	case <-time.After(10 * time.Second): // two raft commits, with room for a loaded machine
		t.Fatal("no receiver woke for the message")
	}
	time.Sleep(300 * time.Millisecond) // let any losing receive commit
	// The enqueue and one receive; a tick may ride along.
	if n := leader.sh.ProposerStats().Commands - before; n > 3 {
		t.Fatalf("%d commands for one enqueue received by one of %d waiting consumers: the waiters all proposed", n, consumers)
	}
	select {
	case g := <-done:
		t.Fatalf("a second receiver returned (%v, %v) with nothing left to lease", g.msgs, g.err)
	default:
	}
	// The others are still waiting, and the next message reaches one.
	id2 := mustEnqueue(t, leader.sh, "q", &fsmpb.NewMessage{Body: []byte("two")})
	select {
	case g := <-done:
		if g.err != nil || len(g.msgs) != 1 || g.msgs[0].GetId() != id2 {
			t.Fatalf("second receiver got %v, %v; want message %d", g.msgs, g.err, id2)
		}
	case <-time.After(10 * time.Second): // as above
		t.Fatal("the remaining receivers did not wake for the second message")
	}
}

// Receives proceed while the queue holds more than the ones in flight asked
// for, and an empty queue answers a receive without a raft round.
func TestReceiveClaimsOnlyWhatIsLeasable(t *testing.T) {
	c := newCluster(t, 3, true, fastTuning())
	leader := c.leader()
	mustQueue(t, leader.sh, "q", standard(time.Minute))
	enqueueN(t, leader.sh, "q", 10)
	counts := make(chan int, 2)
	for range 2 {
		go func() {
			res, err := leader.sh.Claim(context.Background(), &fsmpb.Receive{Queue: "q", Max: 4})
			if err != nil {
				t.Error(err)
			}
			counts <- len(res.GetReceive().GetMessages())
		}()
	}
	for range 2 {
		if n := <-counts; n != 4 {
			t.Fatalf("a concurrent receive of 4 from 10 got %d", n)
		}
	}
	res, err := leader.sh.Claim(context.Background(), &fsmpb.Receive{Queue: "q", Max: 4})
	if err != nil || len(res.GetReceive().GetMessages()) != 2 {
		t.Fatalf("third receive = %v, %v; want the 2 left", res, err)
	}
	before := leader.sh.ProposerStats().Commands
	res, err = leader.sh.Claim(context.Background(), &fsmpb.Receive{Queue: "q", Max: 4})
	if err != nil || len(res.GetReceive().GetMessages()) != 0 {
		t.Fatalf("receive on an empty queue = %v, %v", res, err)
	}
	if n := leader.sh.ProposerStats().Commands - before; n != 0 {
		t.Fatalf("a receive on an empty queue proposed %d commands", n)
	}
	// A queue this shard does not hold still reaches the FSM, which refuses it.
	res, err = leader.sh.Claim(context.Background(), &fsmpb.Receive{Queue: "nope", Max: 1})
	if err != nil || res.GetStatus().GetCode() != fsmpb.Code_CODE_QUEUE_NOT_FOUND {
		t.Fatalf("receive on an unknown queue = %v, %v; want QUEUE_NOT_FOUND", res, err)
	}
}

// A follower that holds the queue (empty) still answers a receive with the
// leader's hint, not with an empty result after the wait: the claim check
// must not stand in for the leadership check.
func TestFollowerReceiveOnEmptyQueueReturnsNotLeader(t *testing.T) {
	c := newCluster(t, 3, true, fastTuning())
	leader := c.leader()
	mustQueue(t, leader.sh, "q", standard(time.Minute))
	for _, f := range c.followers(leader) {
		deadline := time.Now().Add(5 * time.Second)
		for {
			if _, ok := f.sh.FSM().Leasable("q"); ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never applied the queue", f.id)
			}
			time.Sleep(10 * time.Millisecond)
		}
		// A follower that waited out the long poll would take 10 s.
		for _, wait := range []time.Duration{0, 10 * time.Second} {
			start := time.Now()
			_, err := pollClaim(context.Background(), f.sh, &fsmpb.Receive{Queue: "q", Max: 1}, wait)
			if !errors.Is(err, raftgroup.ErrNotLeader) {
				t.Fatalf("%s: follower Receive (wait %v) err = %v, want raftgroup.ErrNotLeader", f.id, wait, err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("%s: follower Receive (wait %v) took %v before refusing", f.id, wait, d)
			}
		}
		// Nor does a wait on a follower stand in for "nothing yet".
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := f.sh.Wait(ctx, "q")
		cancel()
		if !errors.Is(err, raftgroup.ErrNotLeader) {
			t.Fatalf("%s: follower Wait err = %v, want raftgroup.ErrNotLeader", f.id, err)
		}
	}
}

// A receive that fails (here: its context is already cancelled) gives its
// claim back; a leaked claim would refuse every later receive of the queue.
func TestFailedReceiveReleasesItsClaim(t *testing.T) {
	c := newCluster(t, 3, true, fastTuning())
	leader := c.leader()
	mustQueue(t, leader.sh, "q", standard(time.Minute))
	id := mustEnqueue(t, leader.sh, "q", &fsmpb.NewMessage{Body: []byte("kept")})
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for range 20 {
		if _, err := leader.sh.Claim(cancelled, &fsmpb.Receive{Queue: "q", Max: 1}); err == nil {
			t.Fatal("a receive with a cancelled context succeeded")
		}
	}
	leader.sh.waitMu.Lock()
	left := leader.sh.claimed["q"]
	leader.sh.waitMu.Unlock()
	if left != 0 {
		t.Fatalf("%d messages still claimed after the failed receives", left)
	}
	res, err := leader.sh.Claim(context.Background(), &fsmpb.Receive{Queue: "q", Max: 1})
	if err != nil || len(res.GetReceive().GetMessages()) != 1 || res.GetReceive().GetMessages()[0].GetId() != id {
		t.Fatalf("receive after the failed ones = %v, %v; want message %d", res, err, id)
	}
}

// A receive claims what is leasable and unclaimed, not its whole batch, so
// a second receive can propose for messages that arrive while the first is
// in flight instead of waiting for a full batch more.
func TestClaimTakesWhatIsThere(t *testing.T) {
	c := newCluster(t, 3, true, fastTuning())
	leader := c.leader()
	mustQueue(t, leader.sh, "q", standard(time.Minute))
	enqueueN(t, leader.sh, "q", 3)
	release1, n, ok := leader.sh.claim("q", 256)
	if !ok || n != 3 {
		t.Fatalf("first claim of 256 with 3 leasable: %d, %v; want 3", n, ok)
	}
	if _, _, ok := leader.sh.claim("q", 256); ok {
		t.Fatal("a second claim passed with every leasable message claimed")
	}
	enqueueN(t, leader.sh, "q", 2)
	release2, n, ok := leader.sh.claim("q", 256)
	if !ok || n != 2 {
		t.Fatalf("claim after 2 more arrived: %d, %v; want 2", n, ok)
	}
	release1()
	release2()
	// The receive leases what it claimed: all 5, in one call of 256.
	res, err := leader.sh.Claim(context.Background(), &fsmpb.Receive{Queue: "q", Max: 256})
	if err != nil || len(res.GetReceive().GetMessages()) != 5 {
		t.Fatalf("receive: %v, %d messages; want 5", err, len(res.GetReceive().GetMessages()))
	}
}

// enqueueN enqueues n one-byte messages to queue.
func enqueueN(t testing.TB, s *Shard, queue string, n int) {
	t.Helper()
	for i := range n {
		mustEnqueue(t, s, queue, &fsmpb.NewMessage{Body: []byte{byte(i)}})
	}
}

// pollClaim is a long poll on one shard as the router runs it (Wait, then
// Claim): claim, and while that leases nothing, wait for unclaimed
// messages and claim again, until wait passes (an empty answer).
func pollClaim(ctx context.Context, s *Shard, rq *fsmpb.Receive, wait time.Duration) (*fsmpb.Result, error) {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		res, err := s.Claim(ctx, rq)
		if err != nil || res.GetStatus().GetCode() != fsmpb.Code_CODE_OK || len(res.GetReceive().GetMessages()) > 0 {
			return res, err
		}
		if err := s.Wait(wctx, rq.GetQueue()); err != nil {
			if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
				return emptyReceive(), nil
			}
			return nil, err
		}
	}
}
