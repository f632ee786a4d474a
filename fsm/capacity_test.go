package fsm

import (
	"slices"
	"strings"
	"testing"

	"github.com/raftq/raftq/fsm/fsmpb"
)

// enqueueCodes enqueues and returns each item's code.
func (h *harness) enqueueCodes(queue string, ms ...*fsmpb.NewMessage) []fsmpb.Code {
	h.t.Helper()
	var out []fsmpb.Code
	for _, it := range h.mustOK(enqueueCmd(queue, ms...)).GetEnqueue().GetItems() {
		out = append(out, it.GetStatus().GetCode())
	}
	return out
}

const (
	codeOK   = fsmpb.Code_CODE_OK
	codeFull = fsmpb.Code_CODE_RESOURCE_EXHAUSTED
)

func TestCapacityCountsLiveMessages(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("q", &fsmpb.QueuePolicy{MaxMessagesPerShard: 3, MaxReceiveCount: 1})
	h.mustEnqueue("q", keyed("ka", "a"), body("b"))

	// c fills the queue; d is refused; a retry of a is answered as the
	// message already in (dedup wins over capacity); e is refused.
	r := h.mustOK(enqueueCmd("q", body("c"), body("d"), keyed("ka", "a"), body("e")))
	items := r.GetEnqueue().GetItems()
	var got []fsmpb.Code
	for _, it := range items {
		got = append(got, it.GetStatus().GetCode())
	}
	if !slices.Equal(got, []fsmpb.Code{codeOK, codeFull, codeOK, codeFull}) {
		t.Fatalf("codes %v", got)
	}
	if !items[2].GetDeduplicated() || items[2].GetMessageId() != 1 {
		t.Fatalf("retry of a: %v", items[2])
	}
	if msg := items[1].GetStatus().GetMessage(); !strings.Contains(msg, "max_messages_per_shard 3") {
		t.Fatalf("refusal message %q does not name the limit", msg)
	}

	// Leased messages still count; an acked one frees its place.
	ms := h.mustReceive("q", 2, 1000)
	if got := h.enqueueCodes("q", body("f")); !slices.Equal(got, []fsmpb.Code{codeFull}) {
		t.Fatalf("with 2 leased + 1 ready: %v", got)
	}
	h.mustOK(ackCmd(receipt(ms[0])))
	if got := h.enqueueCodes("q", body("f")); !slices.Equal(got, []fsmpb.Code{codeOK}) {
		t.Fatalf("after an ack: %v", got)
	}
	// Dead messages do not count (max_receive_count 1: a nack kills).
	h.mustOK(nackCmd(nackDelay(receipt(ms[1]), 0, "boom")))
	if st := h.mustStats("q"); st.Dead != 1 {
		t.Fatalf("stats %+v", st)
	}
	if got := h.enqueueCodes("q", body("g")); !slices.Equal(got, []fsmpb.Code{codeOK}) {
		t.Fatalf("after a dead-letter: %v", got)
	}
	// Delayed messages count.
	if got := h.enqueueCodes("q", &fsmpb.NewMessage{Body: []byte("h"), DelayMs: 60_000}); !slices.Equal(got, []fsmpb.Code{codeFull}) {
		t.Fatalf("full queue took a delayed message: %v", got)
	}
	if err := checkInvariants(h.f); err != nil {
		t.Fatal(err)
	}
}

func TestCapacityBytesAndRefusedBatchTail(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("f", &fsmpb.QueuePolicy{Mode: fsmpb.QueueMode_QUEUE_MODE_FIFO, MaxMessageBytes: 100, MaxBytesPerShard: 250})
	big := func(g string) *fsmpb.NewMessage {
		return &fsmpb.NewMessage{Body: []byte(strings.Repeat("x", 100)), GroupId: g}
	}
	small := func(g string) *fsmpb.NewMessage { return &fsmpb.NewMessage{Body: []byte("y"), GroupId: g} }
	h.mustEnqueue("f", big("g1"), big("g2")) // 200 of 250 bytes

	// The big one does not fit; the small one behind it would, but is
	// refused too, so group g1 never gets a later message without the
	// earlier one.
	r := h.mustOK(enqueueCmd("f", big("g1"), small("g1")))
	var got []fsmpb.Code
	for _, it := range r.GetEnqueue().GetItems() {
		got = append(got, it.GetStatus().GetCode())
	}
	if !slices.Equal(got, []fsmpb.Code{codeFull, codeFull}) {
		t.Fatalf("codes %v", got)
	}
	if msg := r.GetEnqueue().GetItems()[0].GetStatus().GetMessage(); !strings.Contains(msg, "max_bytes_per_shard 250") {
		t.Fatalf("refusal message %q does not name the limit", msg)
	}
	// Each command starts afresh: the small one fits on its own.
	if got := h.enqueueCodes("f", small("g1")); !slices.Equal(got, []fsmpb.Code{codeOK}) {
		t.Fatalf("small alone: %v", got)
	}
	// Acking a 100-byte message frees 100 bytes (201 -> 101 live).
	ms := h.mustReceive("f", 1, 1000)
	h.mustOK(ackCmd(receipt(ms[0])))
	if got := h.enqueueCodes("f", big("g3")); !slices.Equal(got, []fsmpb.Code{codeOK}) {
		t.Fatalf("after an ack: %v", got)
	}
	// Purge frees the rest.
	h.mustOK(purgeCmd("f"))
	if got := h.enqueueCodes("f", big("g4"), big("g5")); !slices.Equal(got, []fsmpb.Code{codeOK, codeOK}) {
		t.Fatalf("after purge: %v", got)
	}
	if err := checkInvariants(h.f); err != nil {
		t.Fatal(err)
	}
}

func TestCapacityLoweredBelowDepthKeepsMessages(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("q", nil)
	h.mustEnqueue("q", body("a"), body("b"), body("c"))
	h.mustQueue("q", &fsmpb.QueuePolicy{MaxMessagesPerShard: 2})
	if st := h.mustStats("q"); st.Ready != 3 {
		t.Fatalf("lowering the limit removed messages: %+v", st)
	}
	if got := h.enqueueCodes("q", body("d")); !slices.Equal(got, []fsmpb.Code{codeFull}) {
		t.Fatalf("over the new limit: %v", got)
	}
	// Draining to below the limit lets sends in again.
	for _, m := range h.mustReceive("q", 2, 1000) {
		h.mustOK(ackCmd(receipt(m)))
	}
	if got := h.enqueueCodes("q", body("d")); !slices.Equal(got, []fsmpb.Code{codeOK}) {
		t.Fatalf("below the limit again: %v", got)
	}
	// Raising it to 0 (unlimited) takes everything.
	h.mustQueue("q", nil)
	if got := h.enqueueCodes("q", body("e"), body("f"), body("g")); !slices.Equal(got, []fsmpb.Code{codeOK, codeOK, codeOK}) {
		t.Fatalf("unlimited: %v", got)
	}
}

// A restored replica (a follower catching up from a snapshot, or a new
// leader after failover) must refuse exactly what the old one did: the
// counts the limits read are rebuilt from the records.
func TestCapacitySurvivesSnapshotRestore(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("q", &fsmpb.QueuePolicy{MaxMessagesPerShard: 3, MaxMessageBytes: 10, MaxBytesPerShard: 25})
	h.mustEnqueue("q", body("0123456789"), body("0123456789"))
	h.mustReceive("q", 1, 60_000) // one leased, one ready: 20 bytes

	restored := mustRestore(t, mustSnapshot(t, h.f))
	if err := checkInvariants(restored); err != nil {
		t.Fatal(err)
	}
	h2 := &harness{t: t, f: restored, index: h.index, term: h.term, now: h.now, seed: h.seed}
	for _, x := range []*harness{h, h2} {
		if got := x.enqueueCodes("q", body("0123456789"), body("01234")); !slices.Equal(got, []fsmpb.Code{codeFull, codeFull}) {
			t.Fatalf("byte limit: %v", got)
		}
		if got := x.enqueueCodes("q", body("01234")); !slices.Equal(got, []fsmpb.Code{codeOK}) {
			t.Fatalf("fits: %v", got)
		}
		if got := x.enqueueCodes("q", body("")); !slices.Equal(got, []fsmpb.Code{codeFull}) {
			t.Fatalf("count limit: %v", got)
		}
	}
	if a, b := mustSnapshot(t, h.f), mustSnapshot(t, restored); string(a) != string(b) {
		t.Fatal("original and restored replicas diverged")
	}
}

func TestCapacityPolicyValidation(t *testing.T) {
	for _, tc := range []struct {
		p    *fsmpb.QueuePolicy
		want string
	}{
		{&fsmpb.QueuePolicy{MaxBytesPerShard: 1000}, "max_bytes_per_shard 1000 is below max_message_bytes 262144"},
		{&fsmpb.QueuePolicy{MaxMessageBytes: 2000, MaxBytesPerShard: 1999}, "max_bytes_per_shard 1999 is below max_message_bytes 2000"},
		{&fsmpb.QueuePolicy{MaxBytesPerShard: ^uint64(0)}, "max_bytes_per_shard is 18446744073709551615, allowed 0.."},
		{&fsmpb.QueuePolicy{MaxMessagesPerShard: ^uint64(0)}, "max_messages_per_shard is 18446744073709551615, allowed 0.."},
		{&fsmpb.QueuePolicy{MaxMessageBytes: 2000, MaxBytesPerShard: 2000, MaxMessagesPerShard: 1}, ""},
	} {
		err := ValidatePolicy(tc.p)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%v: %v", tc.p, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.p, err, tc.want)
		}
		// Apply refuses it too, and changes nothing.
		h := newHarness(t)
		if r := h.one(upsertCmd("q", tc.p)); r.GetStatus().GetCode() != fsmpb.Code_CODE_INVALID_ARGUMENT {
			t.Errorf("upsert %v: %v", tc.p, r.GetStatus())
		}
		if _, ok := h.f.Stats("q"); ok {
			t.Errorf("upsert %v created the queue", tc.p)
		}
	}
}
