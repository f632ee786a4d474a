package fsm

import (
	"bytes"
	"slices"
	"testing"

	"github.com/raftq/raftq/fsm/fsmpb"
)

func ackWithResults(rs []*fsmpb.Receipt, results ...[]byte) *fsmpb.Command {
	c := ackCmd(rs...)
	c.GetAck().Results = results
	return c
}

func TestAckKeepsResult(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("q", nil)
	h.mustEnqueue("q", body("a"), body("b"))
	ms := h.mustReceive("q", 2, 5000)
	codes := h.itemCodes(ackWithResults([]*fsmpb.Receipt{receipt(ms[0]), receipt(ms[1])}, []byte("done:a"), nil))
	if !slices.Equal(codes, []fsmpb.Code{fsmpb.Code_CODE_OK, fsmpb.Code_CODE_OK}) {
		t.Fatalf("ack codes %v", codes)
	}
	a := h.mustMessage(ms[0].GetId())
	if a.GetState() != fsmpb.State_STATE_ACKED || string(a.GetResult()) != "done:a" || a.GetBody() != nil {
		t.Fatalf("acked record %v", a)
	}
	if b := h.mustMessage(ms[1].GetId()); b.GetResult() != nil {
		t.Fatalf("record acked without a result has %q", b.GetResult())
	}
	if st := h.mustStats("q"); st.ResultBytes != 6 || st.Acked != 2 {
		t.Fatalf("stats %+v", st)
	}
	// A repeated ack changes nothing, the result included.
	h.itemCodes(ackWithResults([]*fsmpb.Receipt{receipt(ms[0])}, []byte("other")))
	if a := h.mustMessage(ms[0].GetId()); string(a.GetResult()) != "done:a" {
		t.Fatalf("repeat ack replaced the result with %q", a.GetResult())
	}
	// The result survives a snapshot and goes with its record at the end
	// of the completed retention.
	g := mustRestore(t, mustSnapshot(t, h.f))
	if m, ok := g.Message(ms[0].GetId()); !ok || string(m.GetResult()) != "done:a" {
		t.Fatalf("restored record %v", m)
	}
	if err := checkInvariants(g); err != nil {
		t.Fatal(err)
	}
	h.now += DefaultCompletedRetentionMs
	h.one(tickCmd())
	if st := h.mustStats("q"); st.ResultBytes != 0 || st.Acked != 0 {
		t.Fatalf("after retention: %+v", st)
	}
	if err := checkInvariants(h.f); err != nil {
		t.Fatal(err)
	}
}

func TestAckResultLimits(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("q", nil)
	h.mustEnqueue("q", body("a"), body("b"))
	ms := h.mustReceive("q", 2, 5000)
	rs := []*fsmpb.Receipt{receipt(ms[0]), receipt(ms[1])}
	for name, c := range map[string]*fsmpb.Command{
		"too large":        ackWithResults(rs[:1], make([]byte, MaxResultBytes+1)),
		"fewer than acks":  ackWithResults(rs, []byte("x")),
		"more than acks":   ackWithResults(rs[:1], []byte("x"), []byte("y")),
		"one of two large": ackWithResults(rs, []byte("x"), make([]byte, MaxResultBytes+1)),
	} {
		before := stateDigest(t, h.f)
		if got := h.one(c).GetStatus().GetCode(); got != fsmpb.Code_CODE_INVALID_ARGUMENT {
			t.Fatalf("%s: code %v, want INVALID_ARGUMENT", name, got)
		}
		if stateDigest(t, h.f) != before {
			t.Fatalf("%s: a refused ack changed the state", name)
		}
	}
	// Exactly the limit is accepted.
	h.itemCodes(ackWithResults(rs[:1], bytes.Repeat([]byte("r"), MaxResultBytes)))
	if m := h.mustMessage(ms[0].GetId()); len(m.GetResult()) != MaxResultBytes {
		t.Fatalf("result of %d bytes kept", len(m.GetResult()))
	}
}

// TestResultBytesBoundDropsOldestFirst fills a queue's result bound and
// shows the records acked earliest go first, counted, while another
// queue's records and records without results stay.
func TestResultBytesBoundDropsOldestFirst(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("q", &fsmpb.QueuePolicy{CompletedMaxBytesPerShard: 2 * MaxResultBytes})
	h.mustQueue("other", &fsmpb.QueuePolicy{CompletedMaxBytesPerShard: 2 * MaxResultBytes})
	half := make([]byte, MaxResultBytes/2)
	h.mustEnqueue("other", body("o"))
	om := h.mustReceive("other", 1, 60_000)
	h.itemCodes(ackWithResults([]*fsmpb.Receipt{receipt(om[0])}, half))
	plain := h.mustEnqueue("q", body("plain"))
	pm := h.mustReceive("q", 1, 60_000)
	h.itemCodes(ackCmd(receipt(pm[0])))
	var acked []uint64
	for i := range 6 {
		h.now += 10
		id := h.mustEnqueue("q", body("m"))[0]
		m := h.mustReceive("q", 1, 60_000)
		h.itemCodes(ackWithResults([]*fsmpb.Receipt{receipt(m[0])}, half))
		acked = append(acked, id)
		if err := checkInvariants(h.f); err != nil {
			t.Fatalf("after ack %d: %v", i, err)
		}
	}
	// Four halves fit in two results' worth: the first two acked are gone.
	for i, id := range acked {
		_, ok := h.f.Message(id)
		if want := i >= 2; ok != want {
			t.Fatalf("record %d (acked %d of 6) present %v, want %v", id, i+1, ok, want)
		}
	}
	st := h.mustStats("q")
	if st.Evicted != 2 || st.ResultBytes != 2*MaxResultBytes || st.Acked != 5 {
		t.Fatalf("stats %+v", st)
	}
	if _, ok := h.f.Message(plain[0]); !ok {
		t.Fatal("a record without a result was dropped by the byte bound")
	}
	if o := h.mustStats("other"); o.Evicted != 0 || o.ResultBytes != uint64(len(half)) {
		t.Fatalf("other queue %+v", o)
	}
	// The count travels in snapshots.
	g := mustRestore(t, mustSnapshot(t, h.f))
	if st, _ := g.Stats("q"); st.Evicted != 2 || st.ResultBytes != 2*MaxResultBytes {
		t.Fatalf("restored stats %+v", st)
	}
	// Lowering the bound applies at once.
	h.mustQueue("q", &fsmpb.QueuePolicy{CompletedMaxBytesPerShard: MaxResultBytes})
	if st := h.mustStats("q"); st.Evicted != 4 || st.ResultBytes != MaxResultBytes {
		t.Fatalf("after lowering the bound: %+v", st)
	}
	if err := checkInvariants(h.f); err != nil {
		t.Fatal(err)
	}
}

func TestResultBoundValidation(t *testing.T) {
	for _, n := range []uint64{1, MaxResultBytes - 1, MaxBytesPerShardLimit + 1} {
		if err := ValidatePolicy(&fsmpb.QueuePolicy{CompletedMaxBytesPerShard: n}); err == nil {
			t.Fatalf("completed_max_bytes_per_shard %d accepted", n)
		}
	}
	for _, n := range []uint64{0, MaxResultBytes, MaxBytesPerShardLimit} {
		if err := ValidatePolicy(&fsmpb.QueuePolicy{CompletedMaxBytesPerShard: n}); err != nil {
			t.Fatalf("completed_max_bytes_per_shard %d: %v", n, err)
		}
	}
}

func TestResultsNeedFormat7(t *testing.T) {
	r := []*fsmpb.Receipt{{MessageId: 1, LeaseEpoch: 1}}
	cases := []struct {
		name string
		c    *fsmpb.Command
		want uint32
	}{
		{"ack", ackCmd(r...), 1},
		{"ack with an empty result", ackWithResults(r, nil), 7}, // this binary checks the count; format 6 would not
		{"ack with a result", ackWithResults(r, []byte("x")), 7},
		{"upsert", upsertCmd("q", &fsmpb.QueuePolicy{}), 1},
		{"upsert with a result bound", upsertCmd("q", &fsmpb.QueuePolicy{CompletedMaxBytesPerShard: MaxResultBytes}), 7},
	}
	for _, c := range cases {
		if got := CommandFormat(c.c); got != c.want {
			t.Errorf("%s: format %d, want %d", c.name, got, c.want)
		}
	}
}

// The shard's results over all its queues stay within its cap: past it
// the record acked earliest goes, whatever its queue, counted as that
// queue's eviction.
func TestShardResultCapDropsOldestAcrossQueues(t *testing.T) {
	h := newHarness(t)
	h.f.s.resultCap = 2 * MaxResultBytes
	h.mustQueue("a", nil)
	h.mustQueue("b", nil)
	full := make([]byte, MaxResultBytes)
	var acked []uint64
	for _, q := range []string{"a", "b", "b"} {
		h.now += 10
		acked = append(acked, h.mustEnqueue(q, body("m"))[0])
		m := h.mustReceive(q, 1, 60_000)
		h.itemCodes(ackWithResults([]*fsmpb.Receipt{receipt(m[0])}, full))
		if err := checkInvariants(h.f); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := h.f.Message(acked[0]); ok {
		t.Fatal("the shard's earliest result outlived the shard's cap")
	}
	for _, id := range acked[1:] {
		if _, ok := h.f.Message(id); !ok {
			t.Fatalf("record %d dropped, want only the earliest", id)
		}
	}
	if a, b := h.mustStats("a"), h.mustStats("b"); a.Evicted != 1 || b.Evicted != 0 || b.ResultBytes != 2*MaxResultBytes {
		t.Fatalf("stats a %+v, b %+v", a, b)
	}
}
