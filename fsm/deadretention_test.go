package fsm

import (
	"testing"

	"github.com/raftq/raftq/fsm/fsmpb"
)

const day = 24 * 60 * 60 * 1000

func killOne(h *harness, q string) uint64 {
	h.t.Helper()
	m := h.mustReceive(q, 1, 1000)[0]
	h.mustOK(deadLetterCmd(receipt(m), "poison"))
	return m.GetId()
}

// Dead messages go once they have been dead for the queue's dead
// retention, counted per queue and per shard; a queue without one keeps
// them.
func TestDeadRetentionDiscards(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("q", &fsmpb.QueuePolicy{DeadRetentionMs: 14 * day})
	h.mustQueue("keep", nil)
	h.mustEnqueue("q", body("a"), body("b"))
	h.mustEnqueue("keep", body("c"))
	first := killOne(h, "q")
	kept := killOne(h, "keep")
	h.now += day
	second := killOne(h, "q")

	h.now += 13*day - 1 // the first is one ms short of its retention
	h.mustOK(tickCmd())
	if st := h.mustStats("q"); st.Dead != 2 || st.DeadExpired != 0 {
		t.Fatalf("before retention: %+v", st)
	}
	if due, ok := h.f.NextDue(); !ok || due != h.now+1 {
		t.Fatalf("next due %d %v, want %d", due, ok, h.now+1)
	}
	h.now++
	h.mustOK(tickCmd())
	if _, ok := h.f.Message(first); ok {
		t.Fatal("first dead message outlived its retention")
	}
	if st := h.mustStats("q"); st.Dead != 1 || st.DeadExpired != 1 {
		t.Fatalf("after the first expired: %+v", st)
	}
	h.now += day
	h.mustOK(tickCmd())
	if _, ok := h.f.Message(second); ok {
		t.Fatal("second dead message outlived its retention")
	}
	if _, ok := h.f.Message(kept); !ok {
		t.Fatal("a queue without dead retention lost its dead message")
	}
	if c := h.f.Counters(); c.GetDeadExpired() != 2 || c.GetDiscarded() != 0 {
		t.Fatalf("counters %v", c)
	}
	if err := checkInvariants(h.f); err != nil {
		t.Fatal(err)
	}
}

// Setting or shortening the retention applies to messages already dead;
// clearing it keeps them.
func TestDeadRetentionChange(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("q", nil)
	h.mustEnqueue("q", body("a"), body("b"))
	old := killOne(h, "q")
	h.now += 2 * day
	recent := killOne(h, "q")
	h.mustOK(upsertCmd("q", &fsmpb.QueuePolicy{DeadRetentionMs: day}))
	if _, ok := h.f.Message(old); ok {
		t.Fatal("a retention shorter than its age kept the old dead message")
	}
	if _, ok := h.f.Message(recent); !ok {
		t.Fatal("the recent dead message went at once")
	}
	if err := checkInvariants(h.f); err != nil {
		t.Fatal(err)
	}
	h.mustOK(upsertCmd("q", nil))
	h.now += 30 * day
	h.mustOK(tickCmd())
	if _, ok := h.f.Message(recent); !ok {
		t.Fatal("cleared retention still discarded")
	}
	if err := checkInvariants(h.f); err != nil {
		t.Fatal(err)
	}
}

// The expiry index is rebuilt on restore and the per-queue count travels.
func TestDeadRetentionSnapshot(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("q", &fsmpb.QueuePolicy{DeadRetentionMs: day})
	h.mustEnqueue("q", body("a"), body("b"))
	killOne(h, "q")
	h.now += day
	h.mustOK(tickCmd())
	id := killOne(h, "q")
	h.f = mustRestore(t, mustSnapshot(t, h.f))
	if err := checkInvariants(h.f); err != nil {
		t.Fatal(err)
	}
	h.now += day
	h.mustOK(tickCmd())
	if _, ok := h.f.Message(id); ok {
		t.Fatal("restored replica kept an expired dead message")
	}
	if st := h.mustStats("q"); st.DeadExpired != 2 {
		t.Fatalf("restored count %+v", st)
	}
}

func TestDeadRetentionLimitsAndFormat(t *testing.T) {
	h := newHarness(t)
	for _, r := range []int64{-1, MaxDeadRetentionMs + 1} {
		if c := h.one(upsertCmd("q", &fsmpb.QueuePolicy{DeadRetentionMs: r})).GetStatus().GetCode(); c != fsmpb.Code_CODE_INVALID_ARGUMENT {
			t.Errorf("dead_retention_ms %d: %v", r, c)
		}
	}
	if n := CommandFormat(upsertCmd("q", &fsmpb.QueuePolicy{DeadRetentionMs: day})); n != 7 {
		t.Fatalf("upsert with dead retention needs %d", n)
	}
	if n := CommandFormat(upsertCmd("q", nil)); n != 1 {
		t.Fatalf("plain upsert needs %d", n)
	}
}
