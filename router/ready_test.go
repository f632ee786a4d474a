package router

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/peer/peerpb"
)

// A node that has not loaded the shard map (count 0) answers every routed
// call with a NotReadyError, at once and without proposing or forwarding
// anything. ShardForSend used to divide by the count and crash the node.
func TestNotReadyWithoutShardMap(t *testing.T) {
	r := New(remoteTopo{n: 0}, Options{LeaderWait: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	notReady := func(what string, err error) {
		t.Helper()
		var nr *NotReadyError
		if !errors.As(err, &nr) || !errors.Is(err, ErrNotReady) || nr.NodeID != "n1" {
			t.Errorf("%s = %v, want a NotReadyError naming n1", what, err)
		}
	}
	for _, g := range []struct{ group, key string }{{"", ""}, {"g", ""}, {"", "k"}} {
		_, err := r.ShardForSend("q", g.group, g.key)
		notReady("ShardForSend(group "+g.group+", key "+g.key+")", err)
	}
	notReady("Ready", r.Ready())
	enq := &fsmpb.Command{Cmd: &fsmpb.Command_Enqueue{Enqueue: &fsmpb.Enqueue{Queue: "q"}}}
	_, err := r.Apply(ctx, 0, enq)
	notReady("Apply", err)
	_, err = r.ApplyAll(ctx, enq)
	notReady("ApplyAll", err)
	_, err = r.Read(ctx, &peerpb.ShardReadRequest{ShardId: 0, Query: &peerpb.ShardReadRequest_StatsQueue{StatsQueue: "q"}})
	notReady("Read", err)
	start := time.Now()
	_, _, err = r.Receive(ctx, &fsmpb.Receive{Queue: "q", Max: 1}, 10*time.Second)
	notReady("Receive", err)
	// No wait for a leader or for messages: LeaderWait is a minute and the
	// receive asked for 10 s, so returning within either shows it did not
	// start waiting at all.
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Receive took %v to refuse", d)
	}
	if ids := r.rotation(); len(ids) != 0 {
		t.Errorf("rotation over no shards = %v", ids)
	}
}

// Once the map is known the same calls route; an id past it is a caller's
// error, not a readiness one.
func TestShardOutOfRangeOnceReady(t *testing.T) {
	r := New(remoteTopo{n: 2}, Options{LeaderWait: time.Millisecond})
	if err := r.Ready(); err != nil {
		t.Fatalf("Ready with 2 shards = %v", err)
	}
	for range 20 {
		id, err := r.ShardForSend("q", "", "")
		if err != nil || id >= 2 {
			t.Fatalf("ShardForSend = %d, %v", id, err)
		}
	}
	_, err := r.Apply(context.Background(), 2, &fsmpb.Command{})
	if err == nil || errors.Is(err, ErrNotReady) {
		t.Fatalf("Apply on shard 2 of 2 = %v, want an out-of-range error", err)
	}
}
