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

// TestPartitionedLeader cuts the leader off while proposers keep writing to
// it. Nothing it cannot commit may be acknowledged: its callers see
// raftgroup.ErrUnknownResult or raftgroup.NotLeaderError, VerifyLeader fails on it, the majority
// elects a new leader, and after healing every acknowledged write is on all
// replicas.
func TestPartitionedLeader(t *testing.T) {
	c := newCluster(t, 3, true, fastTuning())
	old := c.leader()
	mustQueue(t, old.sh, "q", standard(time.Minute))
	if err := old.sh.VerifyLeader(context.Background()); err != nil {
		t.Fatalf("VerifyLeader on the leader: %v", err)
	}
	for _, f := range c.followers(old) {
		if err := f.sh.VerifyLeader(context.Background()); !errors.Is(err, raftgroup.ErrNotLeader) {
			t.Fatalf("VerifyLeader on follower %s: %v, want raftgroup.ErrNotLeader", f.id, err)
		}
	}

	var (
		mu      sync.Mutex
		acked   []uint64
		outcome = map[string]int{}
		wg      sync.WaitGroup
	)
	stop := make(chan struct{})
	defer func() {
		select {
		case <-stop:
		default:
			close(stop) // a failure below must not leave the writers running
		}
		wg.Wait()
	}()
	okBy := time.Now().Add(10 * time.Second) // a commit takes ms; room for a loaded machine
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				res, err := old.sh.Propose(ctx, enqueueCmd("q", &fsmpb.NewMessage{Body: fmt.Appendf(nil, "%d-%d", w, i)}))
				cancel()
				mu.Lock()
				switch {
				case err == nil:
					acked = append(acked, res.GetEnqueue().GetItems()[0].GetMessageId())
					outcome["ok"]++
				case errors.Is(err, raftgroup.ErrUnknownResult):
					outcome["unknown"]++
				case errors.Is(err, raftgroup.ErrNotLeader):
					outcome["not-leader"]++
				case errors.Is(err, context.DeadlineExceeded):
					// Propose's contract: ctx ended before the command was
					// handed to raft, so it was dropped (a loaded machine
					// can keep it queued that long).
					outcome["dropped"]++
				default:
					outcome[err.Error()]++
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
	}
	// Writes must succeed before the partition; poll rather than sleep, as
	// a loaded machine may take longer than a fixed pause to commit one.
	for ok := 0; ok == 0; {
		if time.Now().After(okBy) {
			t.Fatal("no write succeeded before the partition")
		}
		time.Sleep(10 * time.Millisecond)
		mu.Lock()
		ok = outcome["ok"]
		mu.Unlock()
	}
	c.partition(old)
	var next *node
	deadline := time.Now().Add(10 * time.Second)
	for next == nil && time.Now().Before(deadline) {
		for _, f := range c.followers(old) {
			if f.sh.IsLeader() {
				next = f
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if next == nil {
		t.Fatal("majority side elected no leader")
	}
	// The deposed leader steps down once its lease lapses.
	for old.sh.IsLeader() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := old.sh.VerifyLeader(context.Background()); !errors.Is(err, raftgroup.ErrNotLeader) {
		t.Fatalf("VerifyLeader on the partitioned old leader: %v, want raftgroup.ErrNotLeader", err)
	}
	close(stop)
	wg.Wait()
	t.Logf("outcomes on the partitioned leader: %v", outcome)
	for k := range outcome {
		if k != "ok" && k != "unknown" && k != "not-leader" && k != "dropped" {
			t.Fatalf("unexpected error class %q", k)
		}
	}
	if outcome["ok"] == 0 {
		t.Fatal("no write succeeded before the partition")
	}

	c.heal(old)
	mustEnqueue(t, next.sh, "q", &fsmpb.NewMessage{Body: []byte("after heal")})
	c.converge()
	for _, nd := range c.nodes {
		for _, id := range acked {
			if _, ok := nd.sh.FSM().Message(id); !ok {
				t.Fatalf("%s lacks acknowledged message %d", nd.id, id)
			}
		}
	}
}
