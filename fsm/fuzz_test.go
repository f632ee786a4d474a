package fsm

import (
	"testing"

	"github.com/raftq/raftq/fsm/fsmpb"
	"google.golang.org/protobuf/proto"
)

// seedEntries are one entry per command type plus a few awkward ones.
func seedEntries() []*fsmpb.Entry {
	r := &fsmpb.Receipt{MessageId: 1, LeaseEpoch: 1}
	cmds := []*fsmpb.Command{
		upsertCmd("s", &fsmpb.QueuePolicy{MaxReceiveCount: 2, RetentionMs: 5000}),
		upsertCmd("f", fifoPolicy()),
		deleteCmd("s"), purgeCmd("f"),
		enqueueCmd("s", body("x"), &fsmpb.NewMessage{DedupKey: "k", Priority: 9, DelayMs: 10, Attributes: map[string]string{"a": "b"}}),
		enqueueCmd("f", grouped("g", "1"), &fsmpb.NewMessage{GroupId: "g", RunAtMs: t0 + 5}),
		receiveCmd("s", 3, 100), receiveCmd("f", 0, 0),
		ackCmd(r), nackCmd(nackBackoff(r, "e"), nackDelay(r, 5, "")), extendCmd(r, 0), extendCmd(r, 1000),
		deadLetterCmd(r, "p"), redriveCmd("s", 2), redriveCmd("s", 0, 1), discardCmd("s", 1), discardCmd("s", 0, 1),
		tickCmd(), graceCmd(2, 100), cancelCmd("s", 1, 2), {},
	}
	var out []*fsmpb.Entry
	for i, c := range cmds {
		out = append(out, &fsmpb.Entry{Version: EntryVersion, NowMs: t0 + int64(i)*50, Seed: uint64(i), Commands: []*fsmpb.Command{c}})
	}
	out = append(out,
		&fsmpb.Entry{Version: EntryVersion, NowMs: 1 << 62, Commands: cmds[:8]},
		&fsmpb.Entry{Version: EntryVersion, NowMs: -5, Commands: cmds},
	)
	return out
}

func FuzzDecodeEntry(f *testing.F) {
	for _, e := range seedEntries() {
		b, err := EncodeEntry(e)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0x08, 0x02})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := DecodeEntry(b)
		if err != nil {
			return
		}
		again, err := EncodeEntry(e)
		if err != nil {
			t.Fatalf("a decoded entry does not encode: %v", err)
		}
		e2, err := DecodeEntry(again)
		if err != nil || !proto.Equal(e, e2) {
			t.Fatalf("re-decode: %v", err)
		}
	})
}

// fuzzBase is a shard with both queue kinds holding messages in several
// states, so fuzzed commands have something to act on.
func fuzzBase(t testing.TB) *harness {
	h := newHarness(t)
	h.mustQueue("s", &fsmpb.QueuePolicy{MaxReceiveCount: 2, RetentionMs: 60_000})
	h.mustQueue("f", fifoPolicy())
	h.mustEnqueue("s", body("1"), &fsmpb.NewMessage{DedupKey: "k", Priority: 4}, &fsmpb.NewMessage{DelayMs: 100})
	h.mustEnqueue("f", grouped("g", "1"), grouped("g", "2"), grouped("h", "3"))
	h.mustReceive("s", 1, 1000)
	h.mustReceive("f", 1, 1000)
	return h
}

func FuzzApply(f *testing.F) {
	for _, e := range seedEntries() {
		b, err := EncodeEntry(e)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := DecodeEntry(b)
		if err != nil || stopsReplica(e) {
			return
		}
		h := fuzzBase(t)
		data, err := EncodeEntry(e)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ { // twice: the second sees the first's effects
			h.index++
			out := h.f.Apply(makeLog(h.index, h.term, data))
			if r, ok := out.(*Response); !ok || len(r.Results) != len(e.GetCommands()) {
				t.Fatalf("response %#v for %d commands", out, len(e.GetCommands()))
			}
			if err := checkInvariants(h.f); err != nil {
				t.Fatal(err)
			}
		}
		if err := roundTrip(h.f); err != nil {
			t.Fatal(err)
		}
	})
}

// stopsReplica reports whether e holds a command kind this binary must not
// skip: applying it panics by design (TestUnknownCommandStopsReplica).
func stopsReplica(e *fsmpb.Entry) bool {
	for _, c := range e.GetCommands() {
		if nums, ignorable := UnknownKinds(c); len(nums) > 0 && !ignorable {
			return true
		}
	}
	return false
}
