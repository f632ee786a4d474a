package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/jepsen-lite/history"
)

// fakeMembership is the cluster's side of membership changes for
// fakeCluster: node ids per slot, meta roles, drains that finish after
// a few progress calls, and the fewest running members ever seen.
type fakeMembership struct {
	spare  []bool
	ids    []string
	lastID int
	// meta: node id -> "voter" or "nonvoter" (absent: an initial voter).
	meta map[string]string
	// drains: node id -> progress calls left before it is done.
	drains map[string]int
	// to: node id -> its replacement.
	to      map[string]string
	retired map[string]bool
	// stuck drains never finish.
	stuck bool
	// minLive is the fewest running members seen after a kill (0: no
	// kill yet); refused counts drains the cluster would have refused.
	minLive, refused int
}

func (f *fakeCluster) Members() []int {
	var out []int
	for i := range f.dirs {
		if i >= len(f.spare) || !f.spare[i] {
			out = append(out, i)
		}
	}
	return out
}

func (f *fakeCluster) Spares() []int {
	var out []int
	for i := range f.dirs {
		if i < len(f.spare) && f.spare[i] {
			out = append(out, i)
		}
	}
	return out
}

func (f *fakeCluster) live() int {
	k := 0
	for _, i := range f.Members() {
		if f.running[i] {
			k++
		}
	}
	return k
}

func (f *fakeCluster) sawLive(k int) {
	if f.minLive == 0 || k < f.minLive {
		f.minLive = k
	}
}

func (f *fakeCluster) role(id string) string {
	if r, ok := f.meta[id]; ok {
		return r
	}
	return "voter"
}

func (f *fakeCluster) init() {
	if f.meta == nil {
		f.meta, f.drains, f.to, f.retired = map[string]string{}, map[string]int{}, map[string]string{}, map[string]bool{}
		f.ids = make([]string, len(f.dirs))
		f.lastID = len(f.Members())
	}
}

func (f *fakeCluster) Join(_ context.Context, i int) (string, error) {
	f.init()
	if !f.spare[i] {
		return "", fmt.Errorf("slot %d is no spare", i)
	}
	f.lastID++
	f.ids[i] = fmt.Sprintf("n%d", f.lastID)
	f.spare[i] = false
	f.meta[f.ids[i]] = "nonvoter"
	return f.ids[i], f.start(i, "join")
}

func (f *fakeCluster) Retire(_ context.Context, i int) error {
	f.init()
	if !f.retired[f.NodeID(i)] {
		return fmt.Errorf("%s retired by the harness before the cluster retired it", f.NodeID(i))
	}
	if f.running[i] {
		_ = f.stop(i, "stop")
	}
	f.log(i, "retire")
	f.spare[i] = true
	return nil
}

func (f *fakeCluster) View(context.Context) (map[string]NodeView, error) {
	f.init()
	out := map[string]NodeView{}
	for _, i := range f.Members() {
		id := f.NodeID(i)
		out[id] = NodeView{Alive: f.running[i], Meta: f.role(id), Draining: f.drains[id] > 0, Retired: f.retired[id]}
	}
	return out, nil
}

func (f *fakeCluster) MetaLeader(context.Context) int {
	for _, i := range f.Members() {
		if f.running[i] && f.role(f.NodeID(i)) == "voter" {
			return i
		}
	}
	return -1
}

func (f *fakeCluster) Replace(_ context.Context, old, new string) (Drain, error) {
	f.init()
	f.to[old] = new
	return f.progress(old)
}

func (f *fakeCluster) Remove(_ context.Context, id string) (Drain, error) {
	f.init()
	voters := 0
	for _, i := range f.Members() {
		if f.role(f.NodeID(i)) == "voter" && !f.retired[f.NodeID(i)] {
			voters++
		}
	}
	if _, started := f.drains[id]; !started && f.role(id) == "voter" && voters <= 3 {
		f.refused++
		return Drain{}, errors.New("FailedPrecondition: would leave fewer than 3 meta voters")
	}
	return f.progress(id)
}

// progress starts the drain of id or takes it one step further.
func (f *fakeCluster) progress(id string) (Drain, error) {
	left, started := f.drains[id]
	if !started {
		f.drains[id] = 3
		return Drain{Left: 2}, nil
	}
	if left > 0 && !f.stuck {
		f.drains[id]--
	}
	if f.drains[id] > 0 {
		return Drain{Moving: fmt.Sprintf("shard 0: %s -> %s (add)", id, f.to[id]), Left: 2}, nil
	}
	if !f.retired[id] {
		f.retired[id] = true
		if to := f.to[id]; to != "" && f.role(id) == "voter" {
			f.meta[to] = "voter"
		}
		f.meta[id] = ""
	}
	return Drain{Done: true}, nil
}

// planOp never leaves fewer than MinMembers members, never adds or
// replaces without a spare slot, removes only what removable allows, and
// every operation comes up.
func TestPlanOpKeepsTheClusterLargeEnough(t *testing.T) {
	seen := map[string]int{}
	for seed := uint64(1); seed <= 300; seed++ {
		rng := rand.New(rand.NewPCG(seed, 1))
		for members := 1; members <= 6; members++ {
			for spares := 0; spares <= 2; spares++ {
				for _, rem := range [][]int{nil, {4}} {
					op := planOp(rng, members, spares, rem)
					seen[op]++
					switch op {
					case OpRemove:
						if members <= MinMembers || len(rem) == 0 {
							t.Fatalf("remove with %d members, removable %v", members, rem)
						}
					case OpAdd:
						if spares == 0 || members >= maxMembers {
							t.Fatalf("add with %d members, %d spares", members, spares)
						}
					case OpReplace:
						if spares == 0 {
							t.Fatal("replace without a spare")
						}
					case "":
						if spares > 0 || members > MinMembers && len(rem) > 0 {
							t.Fatalf("nothing planned with %d members, %d spares, removable %v", members, spares, rem)
						}
					}
				}
			}
		}
	}
	for _, op := range []string{OpRemove, OpAdd, OpReplace} {
		if seen[op] == 0 {
			t.Errorf("%s never planned: %v", op, seen)
		}
	}
}

// removable never offers a meta voter while the meta group has only
// MinMembers voters, nor the node whose repair is unfinished.
func TestRemovableSparesTheLastVoters(t *testing.T) {
	id := func(i int) string { return fmt.Sprintf("n%d", i+1) }
	view := map[string]NodeView{"n1": {Meta: "voter"}, "n2": {Meta: "voter"}, "n3": {Meta: "voter"}, "n4": {Meta: "nonvoter"}}
	if got := removable([]int{0, 1, 2, 3}, id, view, -1); !slices.Equal(got, []int{3}) {
		t.Fatalf("3 voters and a nonvoter: removable %v, want [3]", got)
	}
	if got := removable([]int{0, 1, 2, 3}, id, view, 3); len(got) != 0 {
		t.Fatalf("the damaged nonvoter is removable: %v", got)
	}
	view["n4"] = NodeView{Meta: "voter"}
	if got := removable([]int{0, 1, 2, 3}, id, view, 1); !slices.Equal(got, []int{0, 2, 3}) {
		t.Fatalf("4 voters, n2 damaged: removable %v, want [0 2 3]", got)
	}
}

// Membership changes over the fakes: every change is recorded (invoke,
// ok, end without error), the cluster keeps at least MinMembers members
// and never fewer than MinMembers running ones after a kill, the
// harness stops a node only once the cluster retired it (Retire checks),
// no drain is refused, and a leaving node that was killed mid-move is
// never started again.
func TestMembershipChangesKeepTheClusterUp(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		// Kills here are the membership nemesis's own (a kill fault alone
		// may leave 3 members with 2 running, a majority).
		n, f, rec := fastNemesis(t, &fakeNet{}, []string{"membership", "partition"}, seed)
		n.DrainWait = time.Second
		minMembers := len(f.Members())
		f.onEvent = func(string) { minMembers = min(minMembers, len(f.Members())) }
		runUntil(t, n, rec, func(ops []history.Op) bool {
			k := 0
			for _, op := range nemesisOps(ops) {
				if op.Kind == "membership" && op.Type == history.Info {
					k++
				}
			}
			return k >= 8
		})
		if minMembers < MinMembers || f.refused > 0 {
			t.Fatalf("seed %d: %d members at the fewest, %d refused drains; events %v", seed, minMembers, f.refused, f.events)
		}
		if f.minLive != 0 && f.minLive < MinMembers {
			t.Fatalf("seed %d: %d members running after a kill; events %v", seed, f.minLive, f.events)
		}
		if r := nemesisResult(t, rec.Ops()); !r.Valid {
			t.Fatalf("seed %d: nemesis checker: %s %v", seed, r.Summary(), r.Violations)
		}
		// A retired id never starts again.
		gone := map[string]bool{}
		for _, e := range f.events {
			id, what, _ := strings.Cut(e, " ")
			if what == "retire" {
				gone[id] = true
			} else if gone[id] && strings.HasPrefix(what, "start") {
				t.Fatalf("seed %d: %s started after its retirement: %v", seed, id, f.events)
			}
		}
	}
}

// Over many seeds every kind of change happens, and so do kills and
// partitions in the middle of a move.
func TestMembershipCoversEveryChange(t *testing.T) {
	shapes := map[string]bool{}
	for seed := uint64(1); seed <= 5; seed++ {
		n, _, rec := fastNemesis(t, &fakeNet{}, []string{"membership"}, seed)
		n.DrainWait = time.Second
		runUntil(t, n, rec, func(ops []history.Op) bool { return len(nemesisOps(ops)) >= 30 })
		for _, op := range nemesisOps(rec.Ops()) {
			if op.Type != history.OK {
				continue
			}
			shapes[shape(op.Fault)] = true
			for _, d := range []string{"kill -9", "partition isolate"} {
				if strings.Contains(op.Fault, d) && strings.Contains(op.Fault, " during shard ") {
					shapes[d] = true
				}
			}
		}
	}
	for _, want := range []string{"membership-replace", "membership-remove", "membership-add", "kill -9", "partition isolate"} {
		if !shapes[want] {
			t.Errorf("%s never happened: %v", want, shapes)
		}
	}
}

// A drain that never finishes is a failed fault: the run is INVALID
// (nemesis-failed) and the leaving node keeps its slot.
func TestStuckDrainMakesTheRunInvalid(t *testing.T) {
	n, f, rec := fastNemesis(t, &fakeNet{}, []string{"membership"}, 2)
	n.DrainWait = 50 * time.Millisecond
	f.stuck = true
	runUntil(t, n, rec, func(ops []history.Op) bool {
		for _, op := range nemesisOps(ops) {
			if op.Error != "" {
				return true
			}
		}
		return false
	})
	r := nemesisResult(t, rec.Ops())
	if r.Valid || r.Count["nemesis-failed"] == 0 || !strings.Contains(strings.Join(r.Violations, "\n"), "drain not done") {
		t.Fatalf("a stuck drain passed: %s %v", r.Summary(), r.Violations)
	}
}
