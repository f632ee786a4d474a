package nemesis

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftq/raftq/jepsen-lite/checker"
	"github.com/raftq/raftq/jepsen-lite/history"
)

// fakeNet records cuts; partErr and healErr make them fail (broken
// iptables).
type fakeNet struct {
	mu      sync.Mutex
	cuts    [][][]int
	partErr error
	healErr error
}

func (f *fakeNet) Partition(_ context.Context, comps [][]int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cuts = append(f.cuts, comps)
	return f.partErr
}

func (f *fakeNet) Heal(context.Context) error { return f.healErr }

// shaperNet cannot make bridges, as the compose network cannot.
type shaperNet struct{ *fakeNet }

// CanPartition refuses a cut that leaves a node out of every component.
func (s shaperNet) CanPartition(comps [][]int) error {
	n := 0
	for _, c := range comps {
		n += len(c)
	}
	if n < 3 {
		return errors.New("bridge")
	}
	return nil
}

// fastNemesis is a nemesis over fakes whose schedule runs in
// milliseconds.
func fastNemesis(t *testing.T, nw Network, kinds []string, seed uint64) (*Nemesis, *fakeCluster, *history.Recorder) {
	t.Helper()
	f := &fakeCluster{running: []bool{true, true, true, false, false}, repair: make([]bool, 5)}
	f.spare = []bool{false, false, false, true, true}
	for range 5 {
		f.dirs = append(f.dirs, fakeData(t, 200<<10))
	}
	rec, err := history.NewRecorder(filepath.Join(t.TempDir(), "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rec.Close() })
	rec.Add(history.Op{Type: history.Info, F: history.FPhase, Process: history.NemesisProcess, Fault: history.PhaseSetup, Setup: &history.Setup{Nemesis: kinds}})
	n, err := New(nw, f, rec, kinds, time.Millisecond, seed)
	if err != nil {
		t.Fatal(err)
	}
	n.Schedule = Schedule{GapMin: time.Millisecond, GapMax: 3 * time.Millisecond, HoldMin: time.Millisecond, HoldMax: 3 * time.Millisecond}
	n.drainPoll, n.disruptLag = time.Millisecond, 3*time.Millisecond
	return n, f, rec
}

// runUntil runs n until done(ops) holds (polled), with a generous bound.
func runUntil(t *testing.T, n *Nemesis, rec *history.Recorder, done func([]history.Op) bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		n.Run(ctx, time.Minute)
	}()
	deadline := time.After(time.Minute)
	for !done(rec.Ops()) {
		select {
		case <-stopped:
			t.Fatal("the nemesis stopped by itself")
		case <-deadline:
			t.Fatalf("condition not reached within a minute; history: %v", nemesisOps(rec.Ops()))
		case <-time.After(5 * time.Millisecond):
		}
	}
	cancel()
	<-stopped
}

func nemesisOps(ops []history.Op) []history.Op {
	var out []history.Op
	for _, op := range ops {
		if op.F == history.FNemesis {
			out = append(out, op)
		}
	}
	return out
}

func nemesisResult(t *testing.T, ops []history.Op) checker.Result {
	t.Helper()
	for _, r := range checker.Check(ops, checker.Options{}) {
		if r.Name == "nemesis" {
			return r
		}
	}
	t.Fatal("no nemesis checker")
	return checker.Result{}
}

// Each round of len(Kinds) draws holds every kind once, for any seed: no
// seed can starve a kind.
func TestBagDrawsEveryKindEachRound(t *testing.T) {
	for seed := uint64(1); seed <= 500; seed++ {
		n, err := New(nil, &fakeCluster{}, nil, Kinds, time.Second, seed)
		if err != nil {
			t.Fatal(err)
		}
		for round := range 3 {
			var got []string
			for range Kinds {
				got = append(got, n.next())
			}
			slices.Sort(got)
			want := slices.Sorted(slices.Values(Kinds))
			if !slices.Equal(got, want) {
				t.Fatalf("seed %d round %d drew %v", seed, round, got)
			}
		}
	}
}

// A run fires every kind, each first round in bag order, the checker
// finds nothing missing or failed, and the summary accounts for each.
func TestRunFiresEveryKind(t *testing.T) {
	n, _, rec := fastNemesis(t, &fakeNet{}, Kinds, 1)
	runUntil(t, n, rec, func(ops []history.Op) bool {
		fired := map[string]bool{}
		for _, op := range nemesisOps(ops) {
			if op.Type == history.OK {
				fired[op.Kind] = true
			}
		}
		return len(fired) == len(Kinds)
	})
	var first []string
	for _, op := range nemesisOps(rec.Ops()) {
		if op.Type == history.Invoke && len(first) < len(Kinds) {
			first = append(first, op.Kind)
		}
	}
	if len(first) != len(Kinds) || len(slices.Compact(slices.Sorted(slices.Values(first)))) != len(Kinds) {
		t.Fatalf("first round %v is not every kind once", first)
	}
	if r := nemesisResult(t, rec.Ops()); !r.Valid {
		t.Fatalf("nemesis checker: %s %v", r.Summary(), r.Violations)
	}
	for _, s := range checker.Faults(rec.Ops()) {
		if s.Fired == 0 || s.Failed != 0 || s.Held <= 0 || s.MaxHeld > s.Held {
			t.Errorf("%s: %+v", s.Kind, s)
		}
	}
}

// A partition whose iptables rules fail is a failed nemesis operation:
// the checker calls the run INVALID (nemesis-failed) and, with nothing
// else requested, partition never fired (not-fired).
func TestBrokenNetworkMakesTheRunInvalid(t *testing.T) {
	nw := &fakeNet{partErr: errors.New("iptables -A INPUT: exit status 4")}
	n, _, rec := fastNemesis(t, nw, []string{"partition"}, 1)
	runUntil(t, n, rec, func(ops []history.Op) bool {
		for _, op := range nemesisOps(ops) {
			if op.Error != "" {
				return true
			}
		}
		return false
	})
	r := nemesisResult(t, rec.Ops())
	if r.Valid || r.Count["nemesis-failed"] == 0 || r.Count["not-fired"] != 1 {
		t.Fatalf("a broken network passed: %s %v", r.Summary(), r.Violations)
	}
	if !strings.Contains(strings.Join(r.Violations, "\n"), "iptables") {
		t.Errorf("violations do not quote the error: %v", r.Violations)
	}
}

// A fault that applied but could not be undone (heal failing) fails the
// run too, although the kind fired.
func TestFailedUndoMakesTheRunInvalid(t *testing.T) {
	nw := &fakeNet{healErr: errors.New("iptables -F: exit status 1")}
	n, _, rec := fastNemesis(t, nw, []string{"partition"}, 1)
	runUntil(t, n, rec, func(ops []history.Op) bool { return len(nemesisOps(ops)) >= 3 })
	r := nemesisResult(t, rec.Ops())
	if r.Valid || r.Count["nemesis-failed"] == 0 || r.Count["fired-partition"] == 0 {
		t.Fatalf("a failed heal passed: %s %v", r.Summary(), r.Violations)
	}
}

// A rolling restart's invoke is recorded before its first stop and its
// ok after the last node serves again, so the record spans the restart.
func TestRestartRecordSpansTheRestart(t *testing.T) {
	n, f, rec := fastNemesis(t, &fakeNet{}, []string{"restart"}, 1)
	var marks []int // history length at each stop and start
	f.onEvent = func(string) { marks = append(marks, len(rec.Ops())) }
	desc, _, err := n.start(context.Background(), "restart", new(time.Duration), func(d string) {
		rec.Add(history.Op{Type: history.Invoke, F: history.FNemesis, Process: history.NemesisProcess, Kind: "restart", Fault: d})
	})
	if err != nil {
		t.Fatal(err)
	}
	ops := nemesisOps(rec.Ops())
	if len(ops) != 1 || ops[0].Type != history.Invoke {
		t.Fatalf("nemesis ops %v", ops)
	}
	inv := int(ops[0].Index)
	if len(marks) != 6 || marks[0] <= inv {
		t.Fatalf("restart events at history lengths %v, invoke at index %d: the invoke must come first", marks, inv)
	}
	if !strings.HasPrefix(desc, "restart rolling") {
		t.Errorf("description %q", desc)
	}
}

// A network that cannot make a shape gets another shape, never a failed
// fault.
func TestRefusedShapesAreRedrawn(t *testing.T) {
	nw := shaperNet{&fakeNet{}}
	n, _, rec := fastNemesis(t, nw, []string{"partition"}, 3)
	runUntil(t, n, rec, func(ops []history.Op) bool {
		k := 0
		for _, op := range nemesisOps(ops) {
			if op.Type == history.OK {
				k++
			}
		}
		return k >= 30
	})
	for _, op := range nemesisOps(rec.Ops()) {
		if op.Error != "" || strings.Contains(op.Fault, "bridge") {
			t.Fatalf("op %+v", op)
		}
	}
	if r := nemesisResult(t, rec.Ops()); !r.Valid {
		t.Fatalf("nemesis checker: %s %v", r.Summary(), r.Violations)
	}
}
