package router

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/raftgroup"
)

func TestPlanItems(t *testing.T) {
	for _, tc := range []struct {
		name  string
		shard []int // item i goes to shard[i]; -1: refused, sent nowhere
		want  []Part
	}{
		{"none", nil, nil},
		{"one shard", []int{3, 3, 3}, []Part{{Shard: 3, Items: []int{0, 1, 2}}}},
		{"parts in order of their first item", []int{2, 0, 2, 1, 0},
			[]Part{{Shard: 2, Items: []int{0, 2}}, {Shard: 0, Items: []int{1, 4}}, {Shard: 1, Items: []int{3}}}},
		{"refused items skipped", []int{-1, 1, -1, 1}, []Part{{Shard: 1, Items: []int{1, 3}}}},
		{"all refused", []int{-1, -1}, nil},
	} {
		got := PlanItems(len(tc.shard), func(i int) (uint32, bool) { return uint32(tc.shard[i]), tc.shard[i] >= 0 })
		if !slices.EqualFunc(got, tc.want, func(a, b Part) bool { return a.Shard == b.Shard && slices.Equal(a.Items, b.Items) }) {
			t.Errorf("%s: PlanItems = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestPlanShards(t *testing.T) {
	if _, err := New(shardSet{n: 0}, Options{}).PlanShards(); !errors.Is(err, ErrNotReady) {
		t.Fatalf("PlanShards without a map: %v, want ErrNotReady", err)
	}
	plan, err := New(shardSet{n: 3}, Options{}).PlanShards()
	if err != nil {
		t.Fatal(err)
	}
	if want := []Part{{Shard: 0}, {Shard: 1}, {Shard: 2}}; !slices.EqualFunc(plan, want, func(a, b Part) bool { return a.Shard == b.Shard && a.Items == nil }) {
		t.Fatalf("PlanShards = %v, want %v", plan, want)
	}
}

// Answers come in plan order whatever order the calls end in, and a shard
// that fails answers for itself only.
func TestScatterOrderAndPartialFailure(t *testing.T) {
	plan := []Part{{Shard: 4}, {Shard: 1}, {Shard: 3}, {Shard: 0}}
	// Each call waits for the one after it in the plan, so they end in
	// reverse plan order.
	done := make([]chan struct{}, len(plan)+1)
	for i := range done {
		done[i] = make(chan struct{})
	}
	close(done[len(plan)])
	pos := map[uint32]int{4: 0, 1: 1, 3: 2, 0: 3}
	answers := Scatter(context.Background(), plan, func(ctx context.Context, p Part) (string, error) {
		i := pos[p.Shard]
		<-done[i+1]
		defer close(done[i])
		if p.Shard == 3 {
			return "", fmt.Errorf("shard %d down", p.Shard)
		}
		return fmt.Sprintf("from %d", p.Shard), nil
	})
	if len(answers) != len(plan) {
		t.Fatalf("%d answers for %d parts", len(answers), len(plan))
	}
	for i, a := range answers {
		if a.Shard != plan[i].Shard {
			t.Errorf("answer %d is shard %d's, want shard %d's", i, a.Shard, plan[i].Shard)
		}
		switch {
		case a.Shard == 3 && (a.Err == nil || a.Value != ""):
			t.Errorf("shard 3 answered %q, %v; want its error", a.Value, a.Err)
		case a.Shard != 3 && (a.Err != nil || a.Value != fmt.Sprintf("from %d", a.Shard)):
			t.Errorf("shard %d answered %q, %v; want its own value", a.Shard, a.Value, a.Err)
		}
	}
}

// No more than the limit are out at once, and the limit is used.
func TestScatterBoundsConcurrency(t *testing.T) {
	const parts, limit = 7, 3
	plan := make([]Part, parts)
	for i := range plan {
		plan[i] = Part{Shard: uint32(i)}
	}
	var inflight, most atomic.Int32
	release := make(chan struct{})
	finished := make(chan []Answer[int])
	go func() {
		finished <- scatter(context.Background(), plan, limit, func(ctx context.Context, p Part) (int, error) {
			n := inflight.Add(1)
			for {
				m := most.Load()
				if n <= m || most.CompareAndSwap(m, n) {
					break
				}
			}
			<-release
			inflight.Add(-1)
			return int(p.Shard), nil
		})
	}()
	// The first limit calls start together; the rest wait for a slot.
	deadline := time.Now().Add(10 * time.Second)
	for inflight.Load() < limit {
		if time.Now().After(deadline) {
			t.Fatalf("only %d calls started, want %d at once", inflight.Load(), limit)
		}
		time.Sleep(time.Millisecond)
	}
	for range parts {
		release <- struct{}{}
	}
	answers := <-finished
	if got := most.Load(); got != limit {
		t.Errorf("at most %d calls were out at once, want the limit %d", got, limit)
	}
	for i, a := range answers {
		if a.Err != nil || a.Value != i {
			t.Errorf("answer %d: %d, %v", i, a.Value, a.Err)
		}
	}
}

// Once ctx ends, the parts not yet started are not started and answer
// ctx's error; the call that was out sees ctx end.
func TestScatterStopsStartingOnCancel(t *testing.T) {
	plan := []Part{{Shard: 0}, {Shard: 1}, {Shard: 2}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var called []uint32
	answers := scatter(ctx, plan, 1, func(ctx context.Context, p Part) (int, error) {
		mu.Lock()
		called = append(called, p.Shard)
		mu.Unlock()
		cancel()
		<-ctx.Done()
		return 0, ctx.Err()
	})
	if !slices.Equal(called, []uint32{0}) {
		t.Errorf("calls made: %v, want only shard 0's", called)
	}
	for _, a := range answers {
		if !errors.Is(a.Err, context.Canceled) {
			t.Errorf("shard %d: %v, want context.Canceled", a.Shard, a.Err)
		}
	}

	// Already ended: nothing is called, also for a single part.
	for _, plan := range [][]Part{{{Shard: 0}}, {{Shard: 0}, {Shard: 1}}} {
		answers := Scatter(ctx, plan, func(context.Context, Part) (int, error) {
			t.Error("called with ctx ended")
			return 0, nil
		})
		for _, a := range answers {
			if !errors.Is(a.Err, context.Canceled) {
				t.Errorf("shard %d with ctx ended: %v, want context.Canceled", a.Shard, a.Err)
			}
		}
	}
}

// ApplyAll without a shard map is a *NotReadyError, not success over no
// shards; with shards it asks every one and reports the first failing
// shard in shard order (here none has a leader).
func TestApplyAll(t *testing.T) {
	r := New(shardSet{n: 0}, Options{})
	if _, err := r.ApplyAll(context.Background(), &fsmpb.Command{}); !errors.Is(err, ErrNotReady) {
		t.Fatalf("ApplyAll without a map: %v, want ErrNotReady", err)
	}
	r = New(shardSet{n: 3}, Options{LeaderWait: time.Millisecond})
	results, err := r.ApplyAll(context.Background(), &fsmpb.Command{})
	var nl *raftgroup.NotLeaderError
	if !errors.As(err, &nl) || !nl.Waited || nl.Group != "shard-0" || len(results) != 3 {
		t.Fatalf("ApplyAll over leaderless shards: %d results, %v; want 3 and shard 0's not-leader error", len(results), err)
	}
}
