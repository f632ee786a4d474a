package fsm

import (
	"testing"

	"github.com/raftq/raftq/fsm/fsmpb"
)

func untilDone(k, b string) *fsmpb.NewMessage {
	return &fsmpb.NewMessage{DedupKey: k, Body: []byte(b), UniqueUntilDone: true}
}

// sendOne enqueues nm and returns its id and whether it was a dedup hit.
func (h *harness) sendOne(q string, nm *fsmpb.NewMessage) (uint64, bool) {
	h.t.Helper()
	it := h.mustOK(enqueueCmd(q, nm)).GetEnqueue().GetItems()[0]
	if it.GetStatus().GetCode() != fsmpb.Code_CODE_OK {
		h.t.Fatalf("enqueue: %v", it.GetStatus())
	}
	return it.GetMessageId(), it.GetDeduplicated()
}

// A key held until done returns the holder while it waits and while it is
// leased, past the queue's dedup window, and is free once the job ends,
// however it ends.
func TestUniqueUntilDoneHeldWhileLive(t *testing.T) {
	ends := map[string]func(h *harness, id uint64){
		"ack": func(h *harness, id uint64) {
			m := h.mustReceive("q", 1, 30_000)[0]
			h.mustOK(ackCmd(receipt(m)))
		},
		"dead-letter": func(h *harness, id uint64) {
			m := h.mustReceive("q", 1, 30_000)[0]
			h.mustOK(deadLetterCmd(receipt(m), "poison"))
		},
		"cancel": func(h *harness, id uint64) { h.mustOK(cancelCmd("q", id)) },
		"purge":  func(h *harness, id uint64) { h.mustOK(purgeCmd("q")) },
	}
	for name, end := range ends {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			h.mustQueue("q", &fsmpb.QueuePolicy{DedupWindowMs: 1000})
			first, dup := h.sendOne("q", untilDone("k", "a"))
			if dup {
				t.Fatal("first send was a dedup hit")
			}
			h.now += 10_000 // well past the queue's 1 s window
			h.mustOK(tickCmd())
			if id, dup := h.sendOne("q", untilDone("k", "b")); !dup || id != first {
				t.Fatalf("second send while the job waits: id %d dup %v, want %d", id, dup, first)
			}
			// A plain keyed send (no scope) meets the held key too.
			if id, dup := h.sendOne("q", keyed("k", "c")); !dup || id != first {
				t.Fatalf("plain keyed send: id %d dup %v, want %d", id, dup, first)
			}
			end(h, first)
			if err := checkInvariants(h.f); err != nil {
				t.Fatal(err)
			}
			next, dup := h.sendOne("q", untilDone("k", "d"))
			if dup || next == first {
				t.Fatalf("send after the job ended (%s): id %d dup %v", name, next, dup)
			}
		})
	}
}

// unique_for holds a key for its own period instead of the queue's window;
// with until-done as well, the key goes at whichever comes first.
func TestUniqueForPeriod(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("q", &fsmpb.QueuePolicy{DedupWindowMs: 1000})
	long := &fsmpb.NewMessage{DedupKey: "long", Body: []byte("x"), UniqueForMs: 60_000}
	first, _ := h.sendOne("q", long)
	h.now += 59_000
	h.mustOK(tickCmd())
	if id, dup := h.sendOne("q", long); !dup || id != first {
		t.Fatalf("within the period: id %d dup %v", id, dup)
	}
	h.now += 2_000
	h.mustOK(tickCmd())
	if _, dup := h.sendOne("q", long); dup {
		t.Fatal("a send after the period was still a dedup hit")
	}

	// until done, at most 5 s: the period ends first.
	both := &fsmpb.NewMessage{DedupKey: "both", Body: []byte("y"), UniqueForMs: 5_000, UniqueUntilDone: true}
	a, _ := h.sendOne("q", both)
	h.now += 6_000
	h.mustOK(tickCmd())
	b, dup := h.sendOne("q", both)
	if dup || b == a {
		t.Fatalf("after the period with the job still waiting: id %d dup %v", b, dup)
	}
	// ... and the first job's end leaves the second job's key alone.
	h.mustOK(cancelCmd("q", a))
	if id, dup := h.sendOne("q", both); !dup || id != b {
		t.Fatalf("the old holder's end released the new holder's key: id %d dup %v, want %d", id, dup, b)
	}
	if err := checkInvariants(h.f); err != nil {
		t.Fatal(err)
	}
}

// The key held until done survives a snapshot round trip, and a restored
// replica releases it when the job ends, as its leader does.
func TestUniqueUntilDoneAcrossSnapshot(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("q", nil)
	first, _ := h.sendOne("q", untilDone("k", "a"))
	r := mustRestore(t, mustSnapshot(t, h.f))
	h2 := &harness{t: t, f: r, index: h.index, term: h.term, now: h.now + 600_000, seed: h.seed}
	h.now += 600_000
	for _, hh := range []*harness{h, h2} {
		if id, dup := hh.sendOne("q", untilDone("k", "b")); !dup || id != first {
			t.Fatalf("restored key: id %d dup %v, want %d", id, dup, first)
		}
		m := hh.mustReceive("q", 1, 30_000)[0]
		hh.mustOK(ackCmd(receipt(m)))
	}
	if stateDigest(t, h.f) != stateDigest(t, h2.f) {
		t.Fatal("the restored replica parted from the original")
	}
	if _, dup := h2.sendOne("q", untilDone("k", "c")); dup {
		t.Fatal("the restored replica kept the key after the ack")
	}
}

func TestUniqueValidation(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("q", nil)
	for _, nm := range []*fsmpb.NewMessage{
		{Body: []byte("x"), UniqueUntilDone: true}, // no key
		{Body: []byte("x"), UniqueForMs: 1000},     // no key
		{DedupKey: "k", UniqueForMs: -1},           // negative
		{DedupKey: "k", UniqueForMs: MaxRetentionMs + 1},
	} {
		if c := h.enqueueCodes("q", nm); c[0] != fsmpb.Code_CODE_INVALID_ARGUMENT {
			t.Errorf("%v: code %v, want invalid argument", nm, c[0])
		}
	}
}

// A unique send needs every replica at format 7; a plain one does not.
func TestUniqueNeedsFormat7(t *testing.T) {
	if f := CommandFormat(enqueueCmd("q", untilDone("k", "a"))); f != 7 {
		t.Fatalf("until-done enqueue needs format %d, want 7", f)
	}
	if f := CommandFormat(enqueueCmd("q", &fsmpb.NewMessage{DedupKey: "k", UniqueForMs: 5})); f != 7 {
		t.Fatalf("unique_for enqueue needs format %d, want 7", f)
	}
	if f := CommandFormat(enqueueCmd("q", keyed("k", "a"))); f != 1 {
		t.Fatalf("plain keyed enqueue needs format %d, want 1", f)
	}
}
