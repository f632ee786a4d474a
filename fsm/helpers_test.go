package fsm

import (
	"bytes"
	"crypto/sha256"
	"io"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/raftq/raftq/fsm/fsmpb"
)

const t0 = int64(1_700_000_000_000) // a plausible leader clock

func makeLog(index, term uint64, data []byte) *raft.Log {
	return &raft.Log{Index: index, Term: term, Type: raft.LogCommand, Data: data}
}

// harness applies entries straight to an FSM, with no raft.
type harness struct {
	t     testing.TB
	f     *FSM
	index uint64
	term  uint64
	now   int64
	seed  uint64
	woken []string
}

func newHarness(t testing.TB) *harness {
	h := &harness{t: t, term: 1, now: t0, seed: 42}
	h.f = New(Options{Notify: func(q string) { h.woken = append(h.woken, q) }})
	return h
}

func mustEncode(t testing.TB, e *fsmpb.Entry) []byte {
	t.Helper()
	b, err := EncodeEntry(e)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	return b
}

// apply applies one entry stamped with h.now and returns its results.
func (h *harness) apply(cmds ...*fsmpb.Command) []*fsmpb.Result {
	h.t.Helper()
	h.index++
	e := &fsmpb.Entry{Version: EntryVersion, NowMs: h.now, Seed: h.seed + h.index, Commands: cmds}
	out := h.f.Apply(makeLog(h.index, h.term, mustEncode(h.t, e)))
	r, ok := out.(*Response)
	if !ok || len(r.Results) != len(cmds) {
		h.t.Fatalf("apply: got %#v, want *Response with %d results", out, len(cmds))
	}
	return r.Results
}

func (h *harness) one(c *fsmpb.Command) *fsmpb.Result {
	h.t.Helper()
	return h.apply(c)[0]
}

func (h *harness) mustOK(c *fsmpb.Command) *fsmpb.Result {
	h.t.Helper()
	r := h.one(c)
	if r.GetStatus().GetCode() != fsmpb.Code_CODE_OK {
		h.t.Fatalf("command %v: status %v", c, r.GetStatus())
	}
	return r
}

func (h *harness) mustQueue(name string, p *fsmpb.QueuePolicy) {
	h.t.Helper()
	h.mustOK(upsertCmd(name, p))
}

// mustEnqueue enqueues messages and returns their ids, failing on any item error.
func (h *harness) mustEnqueue(queue string, ms ...*fsmpb.NewMessage) []uint64 {
	h.t.Helper()
	r := h.mustOK(enqueueCmd(queue, ms...))
	var ids []uint64
	for _, it := range r.GetEnqueue().GetItems() {
		if it.GetStatus().GetCode() != fsmpb.Code_CODE_OK {
			h.t.Fatalf("enqueue item: %v", it.GetStatus())
		}
		ids = append(ids, it.GetMessageId())
	}
	return ids
}

func (h *harness) mustReceive(queue string, max uint32, visMs int64) []*fsmpb.Message {
	h.t.Helper()
	return h.mustOK(receiveCmd(queue, max, visMs)).GetReceive().GetMessages()
}

func (h *harness) itemCodes(c *fsmpb.Command) []fsmpb.Code {
	h.t.Helper()
	r := h.mustOK(c)
	var out []fsmpb.Code
	for _, it := range r.GetItems().GetItems() {
		out = append(out, it.GetStatus().GetCode())
	}
	return out
}

func (h *harness) mustMessage(id uint64) *fsmpb.Message {
	h.t.Helper()
	m, ok := h.f.Message(id)
	if !ok {
		h.t.Fatalf("message %d not found", id)
	}
	return m
}

func (h *harness) mustStats(q string) Stats {
	h.t.Helper()
	st, ok := h.f.Stats(q)
	if !ok {
		h.t.Fatalf("no stats for queue %q", q)
	}
	return st
}

func ids(ms []*fsmpb.Message) []uint64 {
	var out []uint64
	for _, m := range ms {
		out = append(out, m.GetId())
	}
	return out
}

func receipt(m *fsmpb.Message) *fsmpb.Receipt {
	return &fsmpb.Receipt{MessageId: m.GetId(), LeaseEpoch: m.GetLeaseEpoch()}
}

// Command constructors.

func upsertCmd(q string, p *fsmpb.QueuePolicy) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_UpsertQueue{UpsertQueue: &fsmpb.UpsertQueue{Queue: q, Policy: p}}}
}
func deleteCmd(q string) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_DeleteQueue{DeleteQueue: &fsmpb.DeleteQueue{Queue: q}}}
}
func purgeCmd(q string) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_PurgeQueue{PurgeQueue: &fsmpb.PurgeQueue{Queue: q}}}
}
func enqueueCmd(q string, ms ...*fsmpb.NewMessage) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_Enqueue{Enqueue: &fsmpb.Enqueue{Queue: q, Messages: ms}}}
}
func receiveCmd(q string, max uint32, vis int64) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_Receive{Receive: &fsmpb.Receive{Queue: q, Max: max, VisibilityTimeoutMs: vis, Consumer: "c1"}}}
}
func ackCmd(rs ...*fsmpb.Receipt) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_Ack{Ack: &fsmpb.Ack{Receipts: rs}}}
}
func nackCmd(items ...*fsmpb.NackItem) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_Nack{Nack: &fsmpb.Nack{Items: items}}}
}
func nackDelay(r *fsmpb.Receipt, delayMs int64, errText string) *fsmpb.NackItem {
	return &fsmpb.NackItem{Receipt: r, HasDelay: true, DelayMs: delayMs, Error: errText}
}
func nackBackoff(r *fsmpb.Receipt, errText string) *fsmpb.NackItem {
	return &fsmpb.NackItem{Receipt: r, Error: errText}
}
func extendCmd(r *fsmpb.Receipt, vis int64) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_Extend{Extend: &fsmpb.Extend{Items: []*fsmpb.ExtendItem{{Receipt: r, VisibilityTimeoutMs: vis}}}}}
}
func deadLetterCmd(r *fsmpb.Receipt, errText string) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_DeadLetter{DeadLetter: &fsmpb.DeadLetter{Items: []*fsmpb.DeadLetterItem{{Receipt: r, Error: errText}}}}}
}
func redriveCmd(q string, max uint32, ids ...uint64) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_Redrive{Redrive: &fsmpb.Redrive{Queue: q, MessageIds: ids, Max: max}}}
}
func discardCmd(q string, max uint32, ids ...uint64) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_DiscardDead{DiscardDead: &fsmpb.DiscardDead{Queue: q, MessageIds: ids, Max: max}}}
}
func tickCmd() *fsmpb.Command { return &fsmpb.Command{Cmd: &fsmpb.Command_Tick{Tick: &fsmpb.Tick{}}} }
func graceCmd(term uint64, ms int64) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_LeaderGrace{LeaderGrace: &fsmpb.LeaderGrace{Term: term, GraceMs: ms}}}
}
func cancelCmd(q string, ids ...uint64) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_Cancel{Cancel: &fsmpb.Cancel{Queue: q, MessageIds: ids}}}
}

func body(s string) *fsmpb.NewMessage { return &fsmpb.NewMessage{Body: []byte(s)} }

// memSink is an in-memory raft.SnapshotSink.
type memSink struct {
	bytes.Buffer
	cancelled, closed bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }
func (s *memSink) Close() error  { s.closed = true; return nil }

func mustSnapshot(t testing.TB, f *FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatalf("persist: %v", err)
	}
	snap.Release()
	if !sink.closed || sink.cancelled {
		t.Fatalf("sink closed=%v cancelled=%v", sink.closed, sink.cancelled)
	}
	return sink.Bytes()
}

func mustRestore(t testing.TB, b []byte) *FSM {
	t.Helper()
	f := New(Options{})
	if err := f.Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
		t.Fatalf("restore: %v", err)
	}
	return f
}

func mustDigest(t testing.TB, f *FSM) ([32]byte, uint64) {
	t.Helper()
	d, idx, err := f.Digest()
	if err != nil {
		t.Fatalf("digest: %v", err)
	}
	return d, idx
}

// stateDigest hashes the state without the applied index, to show a command
// changed nothing.
func stateDigest(t testing.TB, f *FSM) [32]byte {
	t.Helper()
	f.mu.RLock()
	defer f.mu.RUnlock()
	v := f.s.view(false)
	v.header.AppliedIndex = 0
	h := sha256.New()
	if err := v.write(h); err != nil {
		t.Fatalf("digest: %v", err)
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}
