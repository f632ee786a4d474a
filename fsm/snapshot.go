package fsm

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/google/btree"
	"github.com/hashicorp/raft"
	"github.com/raftq/raftq/fsm/fsmpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Snapshot stream layout (see docs/fsm.md):
//
//	"raftqfsm" | record* ; record = [type byte][uvarint len][proto bytes]
//
// in this order: one header, queues by name, messages by id, dedup keys by
// (expiry, message id), sealed slots by slot, held groups by (queue, group,
// move), one trailer with the counts. Restore accepts dedup records in any
// order (older builds wrote them by queue and key). A state without seals
// and holds writes the stream builds before them wrote, and reads one.
const (
	snapshotMagic   = "raftqfsm"
	snapshotVersion = 1

	recHeader  byte = 1
	recQueue   byte = 2
	recMessage byte = 3
	recDedup   byte = 4
	recTrailer byte = 5
	recSeal    byte = 6
	recHold    byte = 7

	// maxRecordBytes bounds one record on restore: a message with a full body,
	// attributes and history is well below it.
	maxRecordBytes = 4 << 20
)

// view is what a snapshot writes. Snapshot fills it with copy-on-write
// clones, so Persist can run while Apply goes on: btree.Clone is O(1) and
// shares nodes until either side writes, and message records are never
// changed in place once a snapshot may see them (state.own).
type view struct {
	header *fsmpb.SnapshotHeader
	queues []*fsmpb.SnapshotQueue // by name
	msgs   *btree.BTreeG[msgRef]
	dedup  *btree.BTreeG[dedupExpiry]
	seals  []SlotSeal // by slot
	holds  *btree.BTreeG[holdItem]
}

func (s *state) view(clone bool) *view {
	v := &view{
		header: &fsmpb.SnapshotHeader{
			Version:      snapshotVersion,
			ClockMs:      s.clock,
			AppliedIndex: s.applied,
			NextId:       s.nextID,
			NextSeq:      s.nextSeq,
			LeaseEpoch:   s.leaseEpoch,
			GraceTerm:    s.graceTerm,
			Counters:     proto.Clone(s.counters).(*fsmpb.Counters),
			SlotCount:    s.slotCount,
		},
		msgs:  s.byID,
		dedup: s.dedupExpiry,
		seals: s.sortedSeals(),
		holds: s.holds,
	}
	names := make(map[string]struct{}, len(s.queues))
	for n := range s.queues {
		names[n] = struct{}{}
	}
	for _, n := range sortedKeys(names) {
		q := s.queues[n]
		v.queues = append(v.queues, &fsmpb.SnapshotQueue{Name: n, Policy: clonePolicy(q.policy), Dropped: q.dropped, FirstId: q.firstID, CompletedEvicted: q.evicted, DeadExpired: q.deadExpired})
	}
	if clone {
		v.msgs = s.byID.Clone()
		v.dedup = s.dedupExpiry.Clone()
		v.holds = s.holds.Clone()
		s.gen++
	}
	return v
}

// Snapshot captures the state for raft. It is cheap (no copy of the
// messages); the work happens in Persist, concurrently with Apply.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.s.view(true), nil
}

// Persist streams the snapshot to the sink.
func (v *view) Persist(sink raft.SnapshotSink) error {
	w := bufio.NewWriterSize(sink, 64<<10)
	err := v.write(w)
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("persist fsm snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("close fsm snapshot sink: %w", err)
	}
	return nil
}

// Release is a no-op: the clones are garbage once Persist returns.
func (v *view) Release() {}

type recWriter struct {
	w    io.Writer
	buf  []byte
	mbuf []byte // a message record's body, reused
	// bodies: the publications whose shared body the stream holds
	// already (topics.go).
	bodies map[uint64]struct{}
	err    error
	mo     proto.MarshalOptions
}

func (r *recWriter) record(typ byte, m proto.Message) {
	if r.err != nil {
		return
	}
	var err error
	r.buf = append(r.buf[:0], typ)
	r.buf = binary.AppendUvarint(r.buf, uint64(r.mo.Size(m)))
	// Size just walked m; marshal reuses its sizes instead of a second walk.
	mo := r.mo
	mo.UseCachedSize = true
	r.buf, err = mo.MarshalAppend(r.buf, m)
	if err != nil {
		r.err = fmt.Errorf("marshal snapshot record %d: %w", typ, err)
		return
	}
	if _, err := r.w.Write(r.buf); err != nil {
		r.err = fmt.Errorf("write snapshot record %d: %w", typ, err)
	}
}

// message writes one message record, encoded by hand
// (appendMessageRecord).
func (r *recWriter) message(m *msg) {
	if r.err != nil {
		return
	}
	var err error
	shared := false
	if m.publishedAs != 0 && len(m.body) > 0 {
		// The first record of a publication in the stream carries its
		// body; the records after it name it (topics.go). Records go in id
		// order, the same on every replica.
		if r.bodies == nil {
			r.bodies = map[uint64]struct{}{}
		}
		_, shared = r.bodies[m.publishedAs]
		r.bodies[m.publishedAs] = struct{}{}
	}
	if r.mbuf, err = appendMessageRecord(r.mbuf[:0], m, shared); err != nil {
		r.err = fmt.Errorf("marshal snapshot record %d (message %d): %w", recMessage, m.id, err)
		return
	}
	r.buf = binary.AppendUvarint(append(r.buf[:0], recMessage), uint64(len(r.mbuf)))
	if _, err := r.w.Write(r.buf); err != nil {
		r.err = fmt.Errorf("write snapshot record %d: %w", recMessage, err)
		return
	}
	if _, err := r.w.Write(r.mbuf); err != nil {
		r.err = fmt.Errorf("write snapshot record %d: %w", recMessage, err)
	}
}

// dedup writes one dedup key as a DedupRecord. It encodes by hand because
// a busy shard holds millions of keys and proto.Marshal of each (a message
// allocated per key) was most of a snapshot's cost. The bytes are the ones
// deterministic proto.Marshal writes (fields in number order, zero values
// left out), so the stream and Digest do not change (TestDedupRecordEncoding).
func (r *recWriter) dedup(e dedupExpiry) {
	if r.err != nil {
		return
	}
	// r.buf, not a stack array: a buffer passed to the io.Writer escapes,
	// which would cost an allocation per key.
	b := appendDedupRecord(append(r.buf[:0], recDedup, 0), e)
	b[1] = byte(len(b) - 2) // at most 40 bytes: a one-byte uvarint
	r.buf = b
	if _, err := r.w.Write(b); err != nil {
		r.err = fmt.Errorf("write snapshot record %d: %w", recDedup, err)
	}
}

func appendDedupRecord(b []byte, e dedupExpiry) []byte {
	if e.id != 0 {
		b = protowire.AppendTag(b, 3, protowire.VarintType) // message_id
		b = protowire.AppendVarint(b, e.id)
	}
	if e.t != 0 {
		b = protowire.AppendTag(b, 4, protowire.VarintType) // expire_ms
		b = protowire.AppendVarint(b, uint64(e.t))
	}
	b = protowire.AppendTag(b, 5, protowire.BytesType) // key_hash
	return protowire.AppendBytes(b, e.h[:])
}

func (v *view) write(w io.Writer) error {
	if _, err := io.WriteString(w, snapshotMagic); err != nil {
		return fmt.Errorf("write snapshot magic: %w", err)
	}
	// Deterministic: attribute maps are written in key order, so replicas
	// with equal state write equal bytes (Digest relies on it).
	r := &recWriter{w: w, mo: proto.MarshalOptions{Deterministic: true}}
	r.record(recHeader, v.header)
	for _, q := range v.queues {
		r.record(recQueue, q)
	}
	tr := &fsmpb.SnapshotTrailer{Queues: uint64(len(v.queues))}
	v.msgs.Ascend(func(it msgRef) bool {
		r.message(it.m)
		tr.Messages++
		return r.err == nil
	})
	v.dedup.Ascend(func(e dedupExpiry) bool {
		r.dedup(e)
		tr.Dedup++
		return r.err == nil
	})
	for _, sl := range v.seals {
		r.record(recSeal, &fsmpb.SnapshotSeal{Slot: sl.Slot, MoveId: sl.MoveID, ToShard: sl.To})
		tr.Seals++
	}
	v.holds.Ascend(func(h holdItem) bool {
		r.record(recHold, &fsmpb.SnapshotHold{Queue: h.queue, Group: h.group, MoveId: h.move, FromShard: h.from})
		tr.Holds++
		return r.err == nil
	})
	r.record(recTrailer, tr)
	return r.err
}

// Digest is the sha256 of the snapshot stream the state would produce, and
// the applied index it belongs to. Replicas at the same index must agree.
// Like Snapshot it holds the lock only to take copy-on-write clones, so it
// may run on a busy shard.
func (f *FSM) Digest() ([32]byte, uint64, error) {
	f.mu.Lock()
	v := f.s.view(true)
	f.mu.Unlock()
	sum, err := v.digest()
	return sum, v.header.GetAppliedIndex(), err
}

// digest is the sha256 of the snapshot stream of v.
func (v *view) digest() ([32]byte, error) {
	h := sha256.New()
	if err := v.write(h); err != nil {
		return [32]byte{}, fmt.Errorf("digest: %w", err)
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

// checkpoint is a view taken for a replica comparison (Options.Checkpoint).
type checkpoint struct {
	id, index uint64
	v         *view
}

// checkpointOf is the checkpoint id of an entry's Tick, or 0.
func checkpointOf(e *fsmpb.Entry) uint64 {
	for _, c := range e.GetCommands() {
		if t := c.GetTick(); t != nil && t.GetCheckpoint() != 0 {
			return t.GetCheckpoint()
		}
	}
	return 0
}

// readSnapshot builds a fresh state from a snapshot stream.
func readSnapshot(r io.Reader) (*state, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic := make([]byte, len(snapshotMagic))
	if _, err := io.ReadFull(br, magic); err != nil {
		return nil, fmt.Errorf("read magic: %w", err)
	}
	if string(magic) != snapshotMagic {
		return nil, fmt.Errorf("not an fsm snapshot (magic %q)", magic)
	}
	s := newState()
	var (
		buf       []byte
		gotHeader bool
		tr        fsmpb.SnapshotTrailer
		seen      fsmpb.SnapshotTrailer
		msgs      []*msg
		bodies    = map[uint64][]byte{} // publication id -> its shared body
	)
	for {
		typ, err := br.ReadByte()
		if err != nil {
			return nil, fmt.Errorf("read record type: %w (no trailer: truncated?)", err)
		}
		n, err := binary.ReadUvarint(br)
		if err != nil {
			return nil, fmt.Errorf("read record length: %w", err)
		}
		if n > maxRecordBytes {
			return nil, fmt.Errorf("record of %d bytes exceeds %d", n, maxRecordBytes)
		}
		if uint64(cap(buf)) < n {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(br, buf); err != nil {
			return nil, fmt.Errorf("read record: %w", err)
		}
		if !gotHeader && typ != recHeader {
			return nil, fmt.Errorf("first record has type %d, want header", typ)
		}
		switch typ {
		case recHeader:
			h := &fsmpb.SnapshotHeader{}
			if err := proto.Unmarshal(buf, h); err != nil {
				return nil, fmt.Errorf("header: %w", err)
			}
			if h.GetVersion() != snapshotVersion {
				return nil, fmt.Errorf("snapshot version %d, this build reads %d", h.GetVersion(), snapshotVersion)
			}
			if gotHeader {
				return nil, errors.New("second header")
			}
			gotHeader = true
			// Ids start at 1 and the dedup index reserves the largest.
			if n := h.GetNextId(); n == 0 || n == tombID {
				return nil, fmt.Errorf("snapshot header: next id %d is reserved", n)
			}
			s.clock, s.applied, s.nextID, s.nextSeq = h.GetClockMs(), h.GetAppliedIndex(), h.GetNextId(), h.GetNextSeq()
			s.leaseEpoch, s.graceTerm = h.GetLeaseEpoch(), h.GetGraceTerm()
			s.slotCount = h.GetSlotCount()
			if h.GetCounters() != nil {
				s.counters = h.GetCounters()
			}
		case recQueue:
			sq := &fsmpb.SnapshotQueue{}
			if err := proto.Unmarshal(buf, sq); err != nil {
				return nil, fmt.Errorf("queue record: %w", err)
			}
			if err := ValidateQueueName(sq.GetName()); err != nil {
				return nil, fmt.Errorf("queue record: %w", err)
			}
			q := newQueue(sq.GetName(), NormalizePolicy(sq.GetPolicy()))
			q.tenant = s.useOf(q.name)
			q.dropped = sq.GetDropped()
			q.deadExpired = sq.GetDeadExpired()
			q.firstID = sq.GetFirstId()
			q.evicted = sq.GetCompletedEvicted()
			s.queues[q.name] = q
			seen.Queues++
		case recMessage:
			pm := &fsmpb.Message{}
			if err := proto.Unmarshal(buf, pm); err != nil {
				return nil, fmt.Errorf("message record: %w", err)
			}
			q, ok := s.queues[pm.GetQueue()]
			if !ok {
				return nil, fmt.Errorf("message %d of unknown queue %q", pm.GetId(), pm.GetQueue())
			}
			m, err := msgFromProto(pm, q)
			if err != nil {
				return nil, fmt.Errorf("message record: %w", err)
			}
			shareBody(m, bodies)
			if _, dup := s.byID.ReplaceOrInsert(msgRef{m.id, m}); dup {
				return nil, fmt.Errorf("message %d twice", m.id)
			}
			q.members.ReplaceOrInsert(m.id)
			if s.inGroups(m) {
				s.joinGroup(m)
			}
			msgs = append(msgs, m)
			seen.Messages++
		case recDedup:
			d := &fsmpb.DedupRecord{}
			if err := proto.Unmarshal(buf, d); err != nil {
				return nil, fmt.Errorf("dedup record: %w", err)
			}
			var h dedupHash
			switch {
			case len(d.GetKeyHash()) == len(h):
				copy(h[:], d.GetKeyHash())
			case len(d.GetKeyHash()) == 0: // a snapshot from before key hashes
				if _, ok := s.queues[d.GetQueue()]; !ok {
					return nil, fmt.Errorf("dedup key of unknown queue %q", d.GetQueue())
				}
				h = hashDedup(d.GetQueue(), d.GetKey())
			default:
				return nil, fmt.Errorf("dedup record: key hash of %d bytes", len(d.GetKeyHash()))
			}
			// A key names a message the shard already numbered; the index
			// also reserves 0 and the largest id, and would panic on them.
			if id := d.GetMessageId(); id == 0 || id >= s.nextID {
				return nil, fmt.Errorf("dedup record for message %d, outside this snapshot's ids 1..%d", id, s.nextID-1)
			}
			if _, dup := s.dedup.get(h); dup {
				return nil, fmt.Errorf("dedup key hash %x twice", h)
			}
			// The expiry index is keyed by (expiry, id): a second record with
			// both would replace the first there and leave its key unexpirable.
			if s.dedupExpiry.Has(dedupExpiry{t: d.GetExpireMs(), id: d.GetMessageId()}) {
				return nil, fmt.Errorf("dedup records for message %d expiring at %d twice", d.GetMessageId(), d.GetExpireMs())
			}
			s.addDedup(h, d.GetMessageId(), d.GetExpireMs())
			seen.Dedup++
		case recSeal:
			if err := s.restoreSeal(buf); err != nil {
				return nil, err
			}
			seen.Seals++
		case recHold:
			if err := s.restoreHold(buf); err != nil {
				return nil, err
			}
			seen.Holds++
		case recTrailer:
			if err := proto.Unmarshal(buf, &tr); err != nil {
				return nil, fmt.Errorf("trailer: %w", err)
			}
			if tr.GetQueues() != seen.Queues || tr.GetMessages() != seen.Messages || tr.GetDedup() != seen.Dedup ||
				tr.GetSeals() != seen.Seals || tr.GetHolds() != seen.Holds {
				return nil, fmt.Errorf("trailer counts %d queues, %d messages, %d dedup, %d seals, %d holds; read %d, %d, %d, %d, %d",
					tr.GetQueues(), tr.GetMessages(), tr.GetDedup(), tr.GetSeals(), tr.GetHolds(),
					seen.Queues, seen.Messages, seen.Dedup, seen.Seals, seen.Holds)
			}
			if len(s.seals) == 0 {
				s.slotCount = 0
			}
			// Indexes need every group member in place first, to know
			// heads, and every hold, to keep held heads out of ready.
			for _, m := range msgs {
				s.attach(m)
			}
			for _, q := range s.queues {
				q.setFilter()
			}
			s.indexSubscriptions()
			return s, nil
		default:
			return nil, fmt.Errorf("unknown record type %d", typ)
		}
	}
}

// restoreSeal reads one SnapshotSeal into s; the header set the slot count.
func (s *state) restoreSeal(b []byte) error {
	sl := &fsmpb.SnapshotSeal{}
	if err := proto.Unmarshal(b, sl); err != nil {
		return fmt.Errorf("seal record: %w", err)
	}
	c := &fsmpb.SealSlots{MoveId: sl.GetMoveId(), Slots: []uint32{sl.GetSlot()}, SlotCount: s.slotCount, ToShard: sl.GetToShard()}
	if err := ValidateSealSlots(c); err != nil {
		return fmt.Errorf("seal record: %w", err)
	}
	if _, dup := s.seals[sl.GetSlot()]; dup {
		return fmt.Errorf("seal record: slot %d twice", sl.GetSlot())
	}
	s.seals[sl.GetSlot()] = slotSeal{move: sl.GetMoveId(), to: sl.GetToShard()}
	return nil
}

// restoreHold reads one SnapshotHold into s. Its queue need not exist: a
// group may be held before its queue reaches the shard.
func (s *state) restoreHold(b []byte) error {
	h := &fsmpb.SnapshotHold{}
	if err := proto.Unmarshal(b, h); err != nil {
		return fmt.Errorf("hold record: %w", err)
	}
	c := &fsmpb.HoldGroups{MoveId: h.GetMoveId(), FromShard: h.GetFromShard(), Items: []*fsmpb.QueueGroup{{Queue: h.GetQueue(), Group: h.GetGroup()}}}
	if err := ValidateHoldGroups(c); err != nil {
		return fmt.Errorf("hold record: %w", err)
	}
	if _, dup := s.holds.ReplaceOrInsert(holdItem{queue: h.GetQueue(), group: h.GetGroup(), move: h.GetMoveId(), from: h.GetFromShard()}); dup {
		return fmt.Errorf("hold record: group %q of queue %q held by move %d twice", h.GetGroup(), h.GetQueue(), h.GetMoveId())
	}
	return nil
}
