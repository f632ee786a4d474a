package shard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/raftgroup"
)

// TestLeaderKillUnderLoadTCP runs three replicas over real TCP (raftmux) and
// bolt files, kills the leader while concurrent proposers enqueue, and checks
// the contract across the failover: acknowledged enqueues, leases and dedup
// survive, a receipt from before the failover goes stale once its lease
// expires and the message is redelivered, and a restarted replica catches up
// to an identical state.
func TestLeaderKillUnderLoadTCP(t *testing.T) {
	c := newCluster(t, 3, false, fastTuning())
	leader := c.leader()
	mustQueue(t, leader.sh, "q", &fsmpb.QueuePolicy{Mode: fsmpb.QueueMode_QUEUE_MODE_STANDARD, DedupWindowMs: 60_000})
	mustQueue(t, leader.sh, "leases", standard(time.Minute))

	dedupID := mustEnqueue(t, leader.sh, "q", &fsmpb.NewMessage{Body: []byte("once"), DedupKey: "dk-1"})
	longID := mustEnqueue(t, leader.sh, "leases", &fsmpb.NewMessage{Body: []byte("long")})
	shortID := mustEnqueue(t, leader.sh, "leases", &fsmpb.NewMessage{Body: []byte("short")})
	long := mustReceive(t, leader.sh, "leases", 1, time.Minute)
	short := mustReceive(t, leader.sh, "leases", 1, 500*time.Millisecond)
	if len(long) != 1 || long[0].GetId() != longID || len(short) != 1 || short[0].GetId() != shortID {
		t.Fatalf("setup receives: %v %v", long, short)
	}

	// Load: concurrent proposers that follow the leader.
	loadCtx, stopLoad := context.WithCancel(context.Background())
	var (
		mu     sync.Mutex
		acked  []uint64
		unsure int
		wg     sync.WaitGroup
	)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; loadCtx.Err() == nil; i++ {
				ctx, cancel := context.WithTimeout(loadCtx, 5*time.Second)
				res, err := c.proposeAnywhere(ctx, enqueueCmd("q", &fsmpb.NewMessage{Body: fmt.Appendf(nil, "w%d-%d", w, i)}))
				cancel()
				mu.Lock()
				switch {
				case err == nil:
					acked = append(acked, res.GetEnqueue().GetItems()[0].GetMessageId())
				case errors.Is(err, raftgroup.ErrUnknownResult):
					unsure++
				}
				mu.Unlock()
			}
		}()
	}
	defer func() { stopLoad(); wg.Wait() }() // a failure below must not leave the load running
	// Poll for acknowledged load instead of sleeping: a loaded machine may
	// commit slowly. 20 s is far above the ms a commit takes.
	waitAcked := func(n int, when string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			mu.Lock()
			got := len(acked)
			mu.Unlock()
			if got >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("only %d enqueues acknowledged %s, want %d: load did not run", got, when, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitAcked(50, "before the kill")
	killed := leader
	killStart := time.Now()
	c.kill(killed)
	next := c.leader()
	t.Logf("new leader %s ready %v after the kill", next.id, time.Since(killStart))
	mu.Lock()
	atFailover := len(acked)
	mu.Unlock()
	waitAcked(atFailover+50, "after the failover")
	stopLoad()
	wg.Wait()
	t.Logf("load: %d acknowledged enqueues, %d indeterminate", len(acked), unsure)

	next = c.leader()
	for _, id := range acked {
		if _, ok := next.sh.FSM().Message(id); !ok {
			t.Fatalf("acknowledged message %d lost after failover", id)
		}
	}
	// Dedup survives the failover.
	res := mustPropose(t, next.sh, enqueueCmd("q", &fsmpb.NewMessage{Body: []byte("again"), DedupKey: "dk-1"}))
	if it := res.GetEnqueue().GetItems()[0]; !it.GetDeduplicated() || it.GetMessageId() != dedupID {
		t.Fatalf("dedup after failover = %v, want deduplicated id %d", it, dedupID)
	}
	// The long lease survives.
	if m, ok := next.sh.FSM().Message(longID); !ok || m.GetState() != fsmpb.State_STATE_LEASED || m.GetLeaseEpoch() != long[0].GetLeaseEpoch() {
		t.Fatalf("long lease after failover = %v", m)
	}
	// The short lease expires under the new leader (after its grace) and
	// the message is redelivered; the old receipt is then stale.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := pollClaim(ctx, next.sh, &fsmpb.Receive{Queue: "leases", Max: 1, VisibilityTimeoutMs: 60_000}, 8*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	again := res.GetReceive().GetMessages()
	if len(again) != 1 || again[0].GetId() != shortID || again[0].GetLeaseEpoch() == short[0].GetLeaseEpoch() {
		t.Fatalf("redelivery = %v, want message %d with a new epoch", again, shortID)
	}
	res = mustPropose(t, next.sh, ackCmd(receiptOf(short[0])))
	if code := res.GetItems().GetItems()[0].GetStatus().GetCode(); code != fsmpb.Code_CODE_STALE_RECEIPT {
		t.Fatalf("ack with pre-failover receipt = %v, want CODE_STALE_RECEIPT", code)
	}
	res = mustPropose(t, next.sh, ackCmd(receiptOf(again[0])))
	if code := res.GetItems().GetItems()[0].GetStatus().GetCode(); code != fsmpb.Code_CODE_OK {
		t.Fatalf("ack with current receipt = %v", code)
	}

	// The killed replica restarts on its directory and catches up.
	c.restart(killed)
	mustEnqueue(t, next.sh, "q", &fsmpb.NewMessage{Body: []byte("after restart")})
	c.converge()
	for _, id := range acked[:min(len(acked), 100)] {
		if _, ok := killed.sh.FSM().Message(id); !ok {
			t.Fatalf("restarted replica lacks acknowledged message %d", id)
		}
	}
}
