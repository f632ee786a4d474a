package fsm

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"strings"
	"testing"

	"github.com/raftq/raftq/fsm/fsmpb"
	"google.golang.org/protobuf/proto"
)

func keyed(k, b string) *fsmpb.NewMessage { return &fsmpb.NewMessage{DedupKey: k, Body: []byte(b)} }

// A queue deleted and created again under the same name starts with no
// dedup keys: the old queue's keys still sit in the index until they
// expire, and must not swallow the new queue's messages.
func TestDedupIgnoresKeysOfADeletedQueue(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("q", nil)
	old := h.mustEnqueue("q", keyed("k", "old"))[0]
	h.mustOK(&fsmpb.Command{Cmd: &fsmpb.Command_DeleteQueue{DeleteQueue: &fsmpb.DeleteQueue{Queue: "q"}}})
	h.mustQueue("q", nil)

	items := h.mustOK(enqueueCmd("q", keyed("k", "new"))).GetEnqueue().GetItems()
	if items[0].GetDeduplicated() || items[0].GetMessageId() == old {
		t.Fatalf("send to the new queue deduplicated against the deleted one: %v", items[0])
	}
	fresh := items[0].GetMessageId()
	if m := h.mustMessage(fresh); string(m.GetBody()) != "new" {
		t.Fatalf("message %d holds %q", fresh, m.GetBody())
	}
	// The new queue's own key works, and keeps working after a snapshot
	// round trip (the queue's first id is part of the snapshot).
	r := mustRestore(t, mustSnapshot(t, h.f))
	h2 := &harness{t: t, f: r, index: h.index, term: h.term, now: h.now, seed: h.seed}
	for _, hh := range []*harness{h, h2} {
		items = hh.mustOK(enqueueCmd("q", keyed("k", "again"))).GetEnqueue().GetItems()
		if !items[0].GetDeduplicated() || items[0].GetMessageId() != fresh {
			t.Fatalf("repeat of the new queue's key: %v, want a hit on %d", items[0], fresh)
		}
		if err := checkInvariants(hh.f); err != nil {
			t.Fatal(err)
		}
	}
}

// Snapshots written before dedup keys were hashed name the queue and key;
// they restore into the hashed index.
func TestRestoreStringKeyedDedupRecords(t *testing.T) {
	h := loaded(t) // holds key "k1" of queue "std"
	first := h.mustOK(enqueueCmd("std", keyed("k1", "x"))).GetEnqueue().GetItems()[0].GetMessageId()
	b := rewriteDedupRecords(t, mustSnapshot(t, h.f), func(d *fsmpb.DedupRecord) {
		d.KeyHash, d.Queue, d.Key = nil, "std", "k1"
	})
	r := mustRestore(t, b)
	h2 := &harness{t: t, f: r, index: h.index, term: h.term, now: h.now, seed: h.seed}
	items := h2.mustOK(enqueueCmd("std", keyed("k1", "y"))).GetEnqueue().GetItems()
	if !items[0].GetDeduplicated() || items[0].GetMessageId() != first {
		t.Fatalf("key from an old-format record: %v, want a hit on %d", items[0], first)
	}
	if err := checkInvariants(r); err != nil {
		t.Fatal(err)
	}
	// A hash of the wrong size is corruption, not a key.
	bad := rewriteDedupRecords(t, mustSnapshot(t, h.f), func(d *fsmpb.DedupRecord) { d.KeyHash = []byte{1, 2, 3} })
	if err := New(Options{}).Restore(io.NopCloser(bytes.NewReader(bad))); err == nil {
		t.Fatal("restored a dedup record with a 3-byte hash")
	}
}

// A dedup record names a message the snapshot's shard had numbered: id 0,
// an id at or past the header's next id, and the largest id (which the
// index reserves) are corruption and refused, not a panic.
func TestRestoreRefusesDedupRecordsOutsideTheIDs(t *testing.T) {
	h := loaded(t)
	h.mustOK(enqueueCmd("std", keyed("k3", "x")))
	for _, id := range []uint64{0, h.f.s.nextID, tombID} {
		b := rewriteDedupRecords(t, mustSnapshot(t, h.f), func(d *fsmpb.DedupRecord) { d.MessageId = id })
		err := New(Options{}).Restore(io.NopCloser(bytes.NewReader(b)))
		if err == nil || !strings.Contains(err.Error(), "outside this snapshot's ids") {
			t.Fatalf("restore of a dedup record for message %d: %v, want refused", id, err)
		}
	}
}

// The header's next id is where the shard numbers its next message; the
// dedup index reserves 0 and the largest id, so a header that would hand
// them out is corruption and refused (applying it would panic later).
func TestRestoreRefusesAHeaderWithReservedNextID(t *testing.T) {
	h := loaded(t)
	for _, next := range []uint64{0, tombID} {
		b := rewriteRecords(t, mustSnapshot(t, h.f), recHeader,
			func() *fsmpb.SnapshotHeader { return &fsmpb.SnapshotHeader{} },
			func(hd *fsmpb.SnapshotHeader) { hd.NextId = next })
		err := New(Options{}).Restore(io.NopCloser(bytes.NewReader(b)))
		if err == nil || !strings.Contains(err.Error(), "next id") {
			t.Fatalf("restore of a header with next id %d: %v, want refused", next, err)
		}
	}
}

// Two dedup records naming the same message and expiry cannot both sit in
// the expiry index; restore refuses them instead of keeping a key that
// would never expire.
func TestRestoreRefusesDedupRecordsSharingAnExpiry(t *testing.T) {
	h := loaded(t)
	h.mustOK(enqueueCmd("std", keyed("k2", "x")))
	var id uint64
	var exp int64
	b := rewriteDedupRecords(t, mustSnapshot(t, h.f), func(d *fsmpb.DedupRecord) {
		if id == 0 {
			id, exp = d.GetMessageId(), d.GetExpireMs()
			return
		}
		d.MessageId, d.ExpireMs = id, exp
	})
	err := New(Options{}).Restore(io.NopCloser(bytes.NewReader(b)))
	if err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("restore of two records for message %d at %d: %v, want refused", id, exp, err)
	}
}

func BenchmarkHashDedup(b *testing.B) {
	b.ReportAllocs()
	for range b.N {
		_ = hashDedup("orders.eu-west", "auto-0123456789abcdef0123456789abcdef")
	}
}

// rewriteDedupRecords re-encodes a snapshot stream with edit applied to
// every dedup record.
func rewriteDedupRecords(t *testing.T, snap []byte, edit func(*fsmpb.DedupRecord)) []byte {
	t.Helper()
	return rewriteRecords(t, snap, recDedup, func() *fsmpb.DedupRecord { return &fsmpb.DedupRecord{} }, edit)
}

// rewriteRecords re-encodes a snapshot stream with edit applied to every
// record of type typ.
func rewriteRecords[M proto.Message](t *testing.T, snap []byte, typ byte, fresh func() M, edit func(M)) []byte {
	t.Helper()
	in := bufio.NewReader(bytes.NewReader(snap[len(snapshotMagic):]))
	out := bytes.NewBufferString(snapshotMagic)
	edited := 0
	for {
		got, err := in.ReadByte()
		if err == io.EOF {
			break
		}
		n, err := binary.ReadUvarint(in)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, n)
		if _, err := io.ReadFull(in, buf); err != nil {
			t.Fatal(err)
		}
		if got == typ {
			d := fresh()
			if err := proto.Unmarshal(buf, d); err != nil {
				t.Fatal(err)
			}
			edit(d)
			if buf, err = proto.Marshal(d); err != nil {
				t.Fatal(err)
			}
			edited++
		}
		out.WriteByte(got)
		out.Write(binary.AppendUvarint(nil, uint64(len(buf))))
		out.Write(buf)
	}
	if edited == 0 {
		t.Fatalf("snapshot holds no record of type %d", typ)
	}
	return out.Bytes()
}
