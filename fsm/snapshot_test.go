package fsm

import (
	"bytes"
	"io"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/raftq/raftq/fsm/fsmpb"
	"google.golang.org/protobuf/proto"
)

// loaded builds a shard with messages in every state, both queue modes,
// dedup keys, attributes and history.
func loaded(t testing.TB) *harness {
	h := newHarness(t)
	h.mustQueue("std", &fsmpb.QueuePolicy{MaxReceiveCount: 2})
	h.mustQueue("fifo", fifoPolicy())
	h.mustEnqueue("std",
		&fsmpb.NewMessage{Body: []byte("a"), Attributes: map[string]string{"z": "1", "a": "2", "m": "3"}, Type: "t", Priority: 3},
		&fsmpb.NewMessage{Body: []byte("b"), DedupKey: "k1"},
		&fsmpb.NewMessage{Body: []byte("c"), DelayMs: 60_000},
		body("d"), body("e"))
	h.mustEnqueue("fifo", grouped("g1", "1"), grouped("g1", "2"), grouped("g2", "3"), &fsmpb.NewMessage{GroupId: "g3", DelayMs: 50})
	ms := h.mustReceive("std", 3, 10_000)
	h.mustOK(ackCmd(receipt(ms[0])))
	h.mustOK(deadLetterCmd(receipt(ms[1]), "poison"))
	h.mustReceive("fifo", 1, 10_000)
	return h
}

func TestSnapshotRestoreRoundTrip(t *testing.T) {
	h := loaded(t)
	want, idx := mustDigest(t, h.f)
	b := mustSnapshot(t, h.f)
	r := mustRestore(t, b)
	got, gotIdx := mustDigest(t, r)
	if got != want || gotIdx != idx {
		t.Fatalf("digest after restore %x@%d, want %x@%d", got, gotIdx, want, idx)
	}
	if err := checkInvariants(r); err != nil {
		t.Fatalf("restored state: %v", err)
	}
	// The restored replica continues exactly like the original.
	h2 := &harness{t: t, f: r, index: h.index, term: h.term, now: h.now, seed: h.seed}
	for _, hh := range []*harness{h, h2} {
		hh.now += 60_000
		hh.mustReceive("fifo", 10, 1000)
		hh.mustReceive("std", 10, 1000)
		hh.mustEnqueue("std", &fsmpb.NewMessage{DedupKey: "k1"})
	}
	d1, _ := mustDigest(t, h.f)
	d2, _ := mustDigest(t, h2.f)
	if d1 != d2 {
		t.Fatal("restored replica diverged after more entries")
	}
	// Snapshots of equal states are byte-identical.
	if !bytes.Equal(mustSnapshot(t, h.f), mustSnapshot(t, h2.f)) {
		t.Fatal("snapshot bytes differ")
	}
}

// A snapshot persisted while entries keep applying restores to the state at
// the time Snapshot was called (copy-on-write records and btrees).
func TestSnapshotDuringLoad(t *testing.T) {
	h := loaded(t)
	want, _ := mustDigest(t, h.f)
	snap, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	done := make(chan error)
	go func() { done <- snap.Persist(sink) }()
	for i := 0; i < 200; i++ {
		h.now += 37
		h.mustEnqueue("std", body("more"))
		for _, m := range h.mustReceive("std", 2, 100) {
			if i%2 == 0 {
				h.mustOK(ackCmd(receipt(m)))
			} else {
				h.mustOK(nackCmd(nackBackoff(receipt(m), "x")))
			}
		}
		h.mustReceive("fifo", 5, 100)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	r := mustRestore(t, sink.Bytes())
	if got, _ := mustDigest(t, r); got != want {
		t.Fatal("snapshot taken during load does not restore the state at Snapshot()")
	}
	if err := checkInvariants(h.f); err != nil {
		t.Fatalf("live state after concurrent persist: %v", err)
	}
}

func TestRestoreRejectsCorruptSnapshots(t *testing.T) {
	b := mustSnapshot(t, loaded(t).f)
	cases := map[string][]byte{
		"empty":       {},
		"bad magic":   append([]byte("notmagic"), b[8:]...),
		"truncated":   b[:len(b)-3],
		"no trailer":  b[:len(b)-5],
		"bad type":    append(append([]byte{}, b[:8]...), 0x7f, 0x00),
		"huge record": append(append([]byte{}, b[:8]...), recHeader, 0xff, 0xff, 0xff, 0xff, 0x0f),
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			f := loaded(t).f
			before, _ := mustDigest(t, f)
			if err := f.Restore(io.NopCloser(bytes.NewReader(data))); err == nil {
				t.Fatal("restore accepted a corrupt snapshot")
			}
			if after, _ := mustDigest(t, f); after != before {
				t.Fatal("a failed restore changed the state")
			}
		})
	}
}

func TestRestoreReplacesState(t *testing.T) {
	empty := mustSnapshot(t, New(Options{}))
	h := loaded(t)
	if err := h.f.Restore(io.NopCloser(bytes.NewReader(empty))); err != nil {
		t.Fatal(err)
	}
	if len(h.f.Queues()) != 0 || h.f.AppliedIndex() != 0 {
		t.Fatalf("restore of an empty snapshot left %v", h.f.Queues())
	}
	if d1, _ := mustDigest(t, h.f); d1 != func() [32]byte { d, _ := mustDigest(t, New(Options{})); return d }() {
		t.Fatal("digest differs from an empty FSM")
	}
}

type failSink struct{ memSink }

func (s *failSink) Write(p []byte) (int, error) { return 0, io.ErrShortWrite }

func TestPersistCancelsOnWriteError(t *testing.T) {
	snap, err := loaded(t).f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &failSink{}
	if err := snap.Persist(sink); err == nil || !sink.cancelled || sink.closed {
		t.Fatalf("Persist = %v, cancelled %v, closed %v; want an error and a cancelled sink", err, sink.cancelled, sink.closed)
	}
}

// The hand-written dedup record must be byte for byte what deterministic
// proto.Marshal writes, so snapshots and digests match replicas that
// marshal it (and earlier builds).
func TestDedupRecordEncoding(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	cases := []dedupExpiry{
		{}, // zero id and expiry: both fields left out
		{t: 1, id: 1},
		{t: -1, id: 0},
		{t: math.MaxInt64, id: math.MaxUint64},
		{t: math.MinInt64, id: 1 << 63},
	}
	for range 1000 {
		var e dedupExpiry
		e.t, e.id = int64(rng.Uint64()>>rng.IntN(64)), rng.Uint64()>>rng.IntN(64)
		for i := range e.h {
			e.h[i] = byte(rng.Uint32())
		}
		cases = append(cases, e)
	}
	mo := proto.MarshalOptions{Deterministic: true}
	for _, e := range cases {
		want, err := mo.Marshal(&fsmpb.DedupRecord{KeyHash: e.h[:], MessageId: e.id, ExpireMs: e.t})
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		r := &recWriter{w: &buf}
		r.dedup(e)
		if r.err != nil {
			t.Fatal(r.err)
		}
		got := buf.Bytes()
		if got[0] != recDedup || int(got[1]) != len(want) || !bytes.Equal(got[2:], want) {
			t.Fatalf("%+v: wrote % x, proto.Marshal gives record % x", e, got, want)
		}
	}
}
