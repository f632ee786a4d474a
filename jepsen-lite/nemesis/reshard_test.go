package nemesis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/jepsen-lite/history"
)

// fakeReshard is the cluster's side of shard-count growth for
// fakeCluster: 2 shards at first, one slot move per old shard to each new
// one, moved one at a time, each progress call taking the first move not
// done one phase further (planned, seal, route, done), as the meta
// leader's driver does (cluster/reshard.go).
type fakeReshard struct {
	count uint32
	moves []SlotMove
	// leaders is what Leaders reports: shard -> slot.
	leaders map[uint32]int
	// movesStuck moves never advance; routeStuck ones never leave route (no
	// consumer drains the old shard's held groups).
	movesStuck, routeStuck bool
	// transient calls fail before the cluster answers; refuse fails
	// every call.
	transient int
	refuse    error
	calls     int
	grows     []uint32
	// atFault is the running move (or "none") when each kill or
	// partition began.
	atFault []string
}

func (f *fakeCluster) SetShardCount(_ context.Context, count uint32) (Growth, error) {
	f.calls++
	if f.refuse != nil {
		return Growth{}, f.refuse
	}
	if f.transient > 0 {
		f.transient--
		return Growth{}, errors.New("rpc error: code = Unavailable desc = no meta leader")
	}
	if f.count == 0 {
		f.count = 2
	}
	switch {
	case count > f.count:
		for to := f.count; to < count; to++ {
			for from := range to {
				f.moves = append(f.moves, SlotMove{From: from, To: to, Slots: 512 / int(count), Phase: PhasePlanned})
			}
		}
		f.count = count
		f.grows = append(f.grows, count)
	case count != 0 && count < f.count:
		return Growth{}, fmt.Errorf("%w: the shard count only grows", ErrRefused)
	default:
		f.step()
	}
	return Growth{Count: f.count, Moves: append([]SlotMove(nil), f.moves...)}, nil
}

func (f *fakeCluster) step() {
	if f.movesStuck {
		return
	}
	for k := range f.moves {
		m := &f.moves[k]
		switch m.Phase {
		case PhasePlanned:
			m.ID, m.Phase = uint64(k+1), PhaseSeal
		case PhaseSeal:
			m.Phase = PhaseRoute
		case PhaseRoute:
			if !f.routeStuck {
				m.Phase = PhaseDone
			}
		default:
			continue
		}
		return
	}
}

// movePhase is the phase of the move under way now, for atFault.
func (f *fakeCluster) movePhase() string {
	if m, ok := (Growth{Moves: f.moves}).running(); ok {
		return m.Phase
	}
	return "none"
}

// phaseNet notes the running move's phase at each partition.
type phaseNet struct {
	*fakeNet
	f *fakeCluster
}

func (p phaseNet) Partition(ctx context.Context, comps [][]int) error {
	p.f.atFault = append(p.f.atFault, p.f.movePhase())
	return p.fakeNet.Partition(ctx, comps)
}

// reshardNemesis is fastNemesis with the move phases noted at each kill
// and partition, and a leader for each shard.
func reshardNemesis(t *testing.T, kinds []string, seed uint64) (*Nemesis, *fakeCluster, *history.Recorder) {
	t.Helper()
	nw := &fakeNet{}
	n, f, rec := fastNemesis(t, nw, kinds, seed)
	n.Net = phaseNet{nw, f}
	f.leaders = map[uint32]int{0: 0, 1: 1, 2: 2, 3: 0, 4: 1}
	f.onEvent = func(e string) {
		if strings.HasSuffix(e, " kill") {
			f.atFault = append(f.atFault, f.movePhase())
		}
	}
	return n, f, rec
}

// One reshard fault: the count grows by one, a kill -9 or an isolating
// partition hits while a slot move is sealed or routed, and the undo heals
// it and returns only once every move is routed (what is left waits for
// consumers).
func TestReshardDisruptsAMoveAndWaitsForItsEnd(t *testing.T) {
	victims := map[string]bool{}
	for seed := uint64(1); seed <= 24; seed++ {
		n, f, _ := reshardNemesis(t, []string{"reshard"}, seed)
		var began string
		hold := time.Millisecond
		desc, undo, err := n.start(context.Background(), "reshard", &hold, func(d string) { began = d })
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if began != "reshard grow 2 -> 3 shards" || !strings.HasPrefix(desc, began+"; ") || shape(desc) != "reshard-grow" {
			t.Fatalf("seed %d: began %q, applied %q", seed, began, desc)
		}
		if len(f.atFault) != 1 || f.atFault[0] != PhaseSeal && f.atFault[0] != PhaseRoute || !strings.Contains(desc, " during move ") {
			t.Fatalf("seed %d: %q: disruption at %v, want one during a sealed or routed move", seed, desc, f.atFault)
		}
		for _, v := range []string{"kill -9", "partition isolate", "meta leader", "the old one", "the new one"} {
			if strings.Contains(desc, v) {
				victims[v] = true
			}
		}
		if err := undo(context.Background()); err != nil {
			t.Fatalf("seed %d: undo: %v", seed, err)
		}
		if f.count != 3 || !(Growth{Count: f.count, Moves: f.moves}).routed(3) {
			t.Fatalf("seed %d: undo returned with %d shards, moves %+v; want every move routed", seed, f.count, f.moves)
		}
		for i, up := range f.running[:3] {
			if !up {
				t.Fatalf("seed %d: %s still down after the undo; events %v", seed, f.NodeID(i), f.events)
			}
		}
	}
	for _, v := range []string{"kill -9", "partition isolate", "meta leader", "the old one", "the new one"} {
		if !victims[v] {
			t.Errorf("%s never chosen: %v", v, victims)
		}
	}
}

// Growth stops at the cap: MaxShards, and MaxShardsPerMember per member;
// a reshard there grows nothing, disrupts nothing and holds nothing.
func TestReshardStopsAtTheCap(t *testing.T) {
	for _, tc := range []struct {
		max  int
		want []uint32
	}{
		{4, []uint32{3, 4}},
		{0, []uint32{3, 4, 5}},     // the first count found (2) + MaxReshardGrowth
		{20, []uint32{3, 4, 5, 6}}, // 3 members: at most 6
	} {
		n, f, _ := reshardNemesis(t, []string{"reshard"}, 1)
		n.MaxShards = tc.max
		capped := 0
		for range 6 {
			hold := time.Millisecond
			desc, undo, err := n.start(context.Background(), "reshard", &hold, func(string) {})
			if err != nil {
				t.Fatal(err)
			}
			if err := undo(context.Background()); err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(desc, "reshard capped") {
				capped++
				if hold != 0 || shape(desc) != "reshard-capped" {
					t.Fatalf("%q held %v", desc, hold)
				}
			}
		}
		if fmt.Sprint(f.grows) != fmt.Sprint(tc.want) || capped != 6-len(tc.want) || len(f.atFault) != len(tc.want) {
			t.Fatalf("max %d: grew %v, capped %d times, %d disruptions; want %v", tc.max, f.grows, capped, len(f.atFault), tc.want)
		}
	}
}

// In a run with other faults every reshard is recorded (invoke, ok, end)
// with the move it disrupted, and the nemesis checker finds nothing
// failed.
func TestReshardRunRecordsEveryStep(t *testing.T) {
	n, f, rec := reshardNemesis(t, []string{"reshard", "kill", "partition"}, 3)
	n.MaxShards = 5
	runUntil(t, n, rec, func(ops []history.Op) bool {
		k := 0
		for _, op := range nemesisOps(ops) {
			if op.Kind == "reshard" && op.Type == history.Info {
				k++
			}
		}
		return k >= 4
	})
	var seq []string
	for _, op := range nemesisOps(rec.Ops()) {
		if op.Kind == "reshard" {
			seq = append(seq, op.Type)
			if op.Type == history.OK && strings.HasPrefix(op.Fault, "reshard grow") && !strings.Contains(op.Fault, " during move ") {
				t.Errorf("a growth without a disruption during a move: %q", op.Fault)
			}
		}
	}
	if !strings.HasPrefix(strings.Join(seq, " "), "invoke ok info invoke ok info invoke ok info invoke ok info") {
		t.Fatalf("reshard records %v", seq)
	}
	if fmt.Sprint(f.grows) != "[3 4 5]" {
		t.Fatalf("grew %v, want [3 4 5] (capped at 5)", f.grows)
	}
	if r := nemesisResult(t, rec.Ops()); !r.Valid || r.Count["fired-reshard"] < 4 {
		t.Fatalf("nemesis checker: %s %v", r.Summary(), r.Violations)
	}
}

// Slot moves that never finish fail the fault within ReshardWait: the
// run is INVALID (nemesis-failed) rather than waiting forever.
func TestStuckSlotMovesMakeTheRunInvalid(t *testing.T) {
	n, f, rec := reshardNemesis(t, []string{"reshard"}, 2)
	n.ReshardWait = 50 * time.Millisecond
	f.routeStuck = true
	t0 := time.Now()
	runUntil(t, n, rec, func(ops []history.Op) bool {
		for _, op := range nemesisOps(ops) {
			if op.Error != "" {
				return true
			}
		}
		return false
	})
	if d := time.Since(t0); d > 10*time.Second {
		t.Fatalf("the stuck growth took %v to fail", d)
	}
	r := nemesisResult(t, rec.Ops())
	if r.Valid || r.Count["nemesis-failed"] == 0 || !strings.Contains(strings.Join(r.Violations, "\n"), "slot moves not done within") {
		t.Fatalf("stuck slot moves passed: %s %v", r.Summary(), r.Violations)
	}
}

// Once the clients stopped, a move left in route (held groups nobody
// consumes any more) ends the fault; the final phase then waits for it
// (AwaitSlotMoves) and says the drain must run again. A move still sealed
// is waited for even then.
func TestRouteLeftToTheFinalDrainOnceClientsStopped(t *testing.T) {
	n, f, _ := reshardNemesis(t, []string{"reshard"}, 4)
	n.ReshardWait = 100 * time.Millisecond
	f.routeStuck = true
	hold := time.Millisecond
	_, undo, err := n.start(context.Background(), "reshard", &hold, func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	if err := undo(context.Background()); err == nil {
		t.Fatal("a move stuck in route passed while the clients ran")
	}
	n.end = time.Now().Add(-time.Second)
	if err := undo(context.Background()); err != nil {
		t.Fatalf("after the end: %v", err)
	}
	if waited, err := n.AwaitSlotMoves(context.Background()); !waited || err == nil {
		t.Fatalf("AwaitSlotMoves with a move stuck in route: waited %v, %v", waited, err)
	}
	f.routeStuck = false
	if waited, err := n.AwaitSlotMoves(context.Background()); !waited || err != nil {
		t.Fatalf("AwaitSlotMoves once the route can end: waited %v, %v", waited, err)
	}
	if waited, err := n.AwaitSlotMoves(context.Background()); waited || err != nil {
		t.Fatalf("AwaitSlotMoves with every move done: waited %v, %v", waited, err)
	}
	f.movesStuck, f.moves = true, append(f.moves, SlotMove{ID: 9, From: 0, To: 2, Slots: 10, Phase: PhaseSeal})
	if err := undo(context.Background()); err == nil || !strings.Contains(err.Error(), "(seal)") {
		t.Fatalf("a sealed move after the end: %v", err)
	}
}

// Calls that fail on the way (an election) are retried within growWait;
// a refusal is not retried; a cluster that never answers fails the
// fault after growWait.
func TestReshardCallsAreBounded(t *testing.T) {
	n, f, _ := reshardNemesis(t, []string{"reshard"}, 5)
	f.transient = 4
	hold := time.Millisecond
	if _, undo, err := n.start(context.Background(), "reshard", &hold, func(string) {}); err != nil {
		t.Fatalf("transient errors: %v", err)
	} else if err := undo(context.Background()); err != nil {
		t.Fatal(err)
	}

	n, f, _ = reshardNemesis(t, []string{"reshard"}, 5)
	f.refuse = fmt.Errorf("%w: rpc error: code = Unimplemented", ErrRefused)
	if _, _, err := n.start(context.Background(), "reshard", &hold, func(string) {}); err == nil || f.calls != 1 {
		t.Fatalf("a refusal: %v after %d calls, want an error after 1", err, f.calls)
	}

	n, f, _ = reshardNemesis(t, []string{"reshard"}, 5)
	n.growWait = 30 * time.Millisecond
	f.transient = 1 << 30
	t0 := time.Now()
	_, _, err := n.start(context.Background(), "reshard", &hold, func(string) {})
	if err == nil || !strings.Contains(err.Error(), "no answer within") || time.Since(t0) > 5*time.Second {
		t.Fatalf("a cluster that never answers: %v after %v", err, time.Since(t0))
	}
}

// A backend without shard-count growth fails the fault.
func TestReshardNeedsAResharder(t *testing.T) {
	n, err := New(&fakeNet{}, plainCluster{}, nil, []string{"reshard"}, time.Millisecond, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := n.reshard(context.Background(), new(time.Duration), func(string) {}); err == nil {
		t.Fatal("reshard on a backend without SetShardCount")
	}
	if waited, err := n.AwaitSlotMoves(context.Background()); waited || err != nil {
		t.Fatalf("AwaitSlotMoves without a resharder: %v %v", waited, err)
	}
}

// plainCluster has only the Cluster levers.
type plainCluster struct{ Cluster }
