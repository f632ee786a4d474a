package server

import (
	"slices"
	"strings"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/peer/peerpb"
)

func deadAt(pairs ...int64) []*fsmpb.Message {
	var out []*fsmpb.Message
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, &fsmpb.Message{StateChangedMs: pairs[i], Id: uint64(pairs[i+1])})
	}
	return out
}

func pageIDs(p deadPage) []string {
	var out []string
	for _, l := range p.items {
		out = append(out, l.info.GetMessageId())
	}
	return out
}

func TestMergeDeadOrderAndLimit(t *testing.T) {
	p := mergeDead([]shardDead{
		{shard: 0, dead: deadAt(10, 1, 30, 2)},
		{shard: 1, dead: deadAt(10, 7, 20, 8)},
	}, 3)
	want := []string{"0-1", "1-7", "1-8"}
	if got := pageIDs(p); !slices.Equal(got, want) {
		t.Fatalf("page %v, want %v", got, want)
	}
	if p.next == nil || *p.next != (deadCursor{ms: 20, shard: 1, id: 8}) {
		t.Fatalf("next %+v", p.next)
	}
	if p := mergeDead([]shardDead{{shard: 0, dead: deadAt(10, 1)}}, 3); p.next != nil {
		t.Fatalf("a short answer of every shard has a next: %+v", p.next)
	}
}

// A shard that stopped at its scan budget bounds the page: nothing past
// where it stopped is listed, and the next page starts after that point,
// even when the page is empty.
func TestMergeDeadScanHorizon(t *testing.T) {
	p := mergeDead([]shardDead{
		{shard: 0, dead: deadAt(50, 3), scannedTo: &peerpb.DeadCursor{Ms: 40, Id: 2}},
		{shard: 1, dead: deadAt(30, 5, 60, 6)},
	}, 10)
	if got := pageIDs(p); !slices.Equal(got, []string{"1-5"}) {
		t.Fatalf("page %v, want only what lies before the horizon", got)
	}
	if p.next == nil || *p.next != (deadCursor{ms: 40, shard: 0, id: 2}) {
		t.Fatalf("next %+v, want the horizon", p.next)
	}
	p = mergeDead([]shardDead{{shard: 2, scannedTo: &peerpb.DeadCursor{Ms: 9, Id: 4}}}, 10)
	if len(p.items) != 0 || p.next == nil || *p.next != (deadCursor{ms: 9, shard: 2, id: 4}) {
		t.Fatalf("empty page: %v, next %+v", pageIDs(p), p.next)
	}
	// On from the horizon: shard 0 after the record it reached, shard 1
	// from the next millisecond, shard 2 at the same one.
	h := *p.next
	for shard, want := range map[uint32][2]int64{1: {9 + 1, 0}, 2: {9, 5}, 3: {9, 0}} {
		if ms, id := h.from(shard); ms != want[0] || int64(id) != want[1] {
			t.Errorf("shard %d resumes at (%d, %d), want %v", shard, ms, id, want)
		}
	}
}

func TestValidateDeadFilter(t *testing.T) {
	for _, f := range []*raftqv1.DeadFilter{
		{Type: strings.Repeat("t", fsm.MaxTypeLen+1)},
		{ErrorContains: strings.Repeat("e", fsm.MaxErrorLen+1)},
		{DeadSinceMs: -1},
		{DeadSinceMs: 10, DeadUntilMs: 10},
	} {
		if err := validateDeadFilter(f); err == nil || !strings.Contains(err.Error(), "InvalidArgument") {
			t.Errorf("%v: %v, want InvalidArgument", f, err)
		}
	}
	if err := validateDeadFilter(&raftqv1.DeadFilter{Type: "email", DeadSinceMs: 1, DeadUntilMs: 2}); err != nil {
		t.Fatal(err)
	}
	if err := validateDeadFilter(nil); err != nil {
		t.Fatal(err)
	}
}

func TestRedriveKey(t *testing.T) {
	if k := redriveKey("orders", "0-1f"); k != "redrive:orders/0-1f" {
		t.Fatalf("key %q", k)
	}
	long := strings.Repeat("q", 120)
	k := redriveKey(long, "3-ff")
	if len(k) > fsm.MaxDedupKeyLen || !strings.HasPrefix(k, redriveKeyPrefix) || k == redriveKey(long, "3-fe") {
		t.Fatalf("long key %q", k)
	}
}

// A shard leader too old to know the filter answers with every dead
// message; the server filters again, so a filtered redrive moves only
// matches, and a full answer bounds the page where the shard stopped.
func TestRefilterAnOldShardsAnswer(t *testing.T) {
	dead := deadAt(10, 1, 20, 2, 30, 3)
	dead[1].Type = "email"
	f := &raftqv1.DeadFilter{Type: "email"}
	p := refilter(shardDead{shard: 0, dead: dead}, f, 3)
	if len(p.dead) != 1 || p.dead[0].GetId() != 2 {
		t.Fatalf("kept %v, want only the email", p.dead)
	}
	if p.scannedTo == nil || p.scannedTo.GetMs() != 30 || p.scannedTo.GetId() != 3 {
		t.Fatalf("scannedTo %v, want the last record sent", p.scannedTo)
	}
	// A short answer was the whole queue: no bound.
	if p := refilter(shardDead{shard: 0, dead: deadAt(10, 1, 20, 2)}, f, 3); p.scannedTo != nil || len(p.dead) != 0 {
		t.Fatalf("short answer: %v, scannedTo %v", p.dead, p.scannedTo)
	}
	for _, c := range []struct {
		f    *raftqv1.DeadFilter
		want bool
	}{
		{&raftqv1.DeadFilter{ErrorContains: "boom"}, true},
		{&raftqv1.DeadFilter{ErrorContains: "bang"}, false},
		{&raftqv1.DeadFilter{DeadSinceMs: 20}, true},
		{&raftqv1.DeadFilter{DeadSinceMs: 21}, false},
		{&raftqv1.DeadFilter{DeadUntilMs: 21}, true},
		{&raftqv1.DeadFilter{DeadUntilMs: 20}, false},
	} {
		m := deadAt(20, 9)[0]
		m.LastError = "a boom here"
		if got := deadMatches(m, c.f); got != c.want {
			t.Errorf("%v on %v: %v, want %v", c.f, m, got, c.want)
		}
	}
}

// A redrive lists only what died before it began, and keeps a filter's
// own earlier bound.
func TestPinUntil(t *testing.T) {
	now := time.UnixMilli(5000)
	if f := pinUntil(nil, now); f.GetDeadUntilMs() != 5001 {
		t.Fatalf("no filter: until %d, want 5001", f.GetDeadUntilMs())
	}
	in := &raftqv1.DeadFilter{Type: "email", DeadUntilMs: 9000}
	f := pinUntil(in, now)
	if f.GetDeadUntilMs() != 5001 || f.GetType() != "email" || in.GetDeadUntilMs() != 9000 {
		t.Fatalf("later bound: %v (caller's %v)", f, in)
	}
	if f := pinUntil(&raftqv1.DeadFilter{DeadUntilMs: 3000}, now); f.GetDeadUntilMs() != 3000 {
		t.Fatalf("earlier bound moved: %v", f)
	}
}

// A redriven copy holds its dedup key for at least redriveKeyHold, so a
// redrive run again an hour later still finds the copies it made.
func TestRedriveCopyHoldsItsKey(t *testing.T) {
	l := listedDead{msg: &fsmpb.Message{Id: 7, Body: []byte("b")}, info: &raftqv1.MessageInfo{MessageId: "0-7"}}
	m := redriveCopy(l, "src", redriveKeyHold)
	if m.GetDedupKey() != "redrive:src/0-7" || m.GetUniqueForMs() != time.Hour.Milliseconds() {
		t.Fatalf("copy %v", m)
	}
}
