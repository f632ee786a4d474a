package fsm

import "encoding/binary"

// dedupIndex maps live dedup key hashes to their message. With every
// Go-client send carrying a key it holds every message of the last dedup
// window (millions of keys at a saturated shard's send rate and the default
// 5 minutes), and every keyed enqueue looks a key up, inserts one and
// expires one: as a Go map, that churn was among the largest costs of a
// saturated leader.
//
// It is an open-addressing table with linear probing over fixed-size,
// pointer-free slots (the garbage collector never scans it), faster than
// the map for this churn (BenchmarkDedupIndex against BenchmarkDedupGoMap;
// docs/benchmarks.md, "Component benchmarks"). Growth is incremental: the
// old table is moved into one twice its size a few slots per insert, so no
// apply pauses for a rehash of millions of keys on every replica at once.
// The index is a look-up structure only; snapshots and expiry order come
// from state.dedupExpiry, so its layout never has to match across replicas.
//
// It stays on the Go heap on purpose. A version mapped outside it and
// advised onto huge pages was no faster (the misses are cache misses, not
// TLB misses) and, no longer counting toward GOGC's heap goal, made the
// collector run more often over the same pointerful heap.
type dedupIndex struct {
	cur dedupTable
	// old is the table being moved into cur, nil slots when none is. Its
	// entries are never in cur too: a put or move tombstones the old copy.
	old    dedupTable
	cursor int // next old slot to move
	n      int // live keys in cur and old
}

// dedupSlot is one key. id 0 is an empty slot (message ids start at 1);
// tombID marks a moved or deleted key in the old table, which takes no
// inserts and so cannot use backward-shift deletion safely mid-move.
type dedupSlot struct {
	h        dedupHash
	id       uint64
	expireMs int64
}

const (
	tombID = ^uint64(0)
	// dedupMinSlots is a new index's size: 32 KB.
	dedupMinSlots = 1024
	// dedupMoveStep is how many old slots each insert moves while growing.
	// A table grows at 3/4 full into one twice its size, so the move ends
	// after cap/8 inserts, with the new table at most 7/16 full.
	dedupMoveStep = 8
)

func newDedupIndex() *dedupIndex {
	return &dedupIndex{cur: newDedupTable(dedupMinSlots)}
}

func (x *dedupIndex) len() int { return x.n }

func (x *dedupIndex) get(h dedupHash) (dedupRef, bool) {
	if i, ok := x.cur.find(h); ok {
		s := &x.cur.slots[i]
		return dedupRef{id: s.id, expireMs: s.expireMs}, true
	}
	if x.old.slots != nil {
		if i, ok := x.old.find(h); ok {
			s := &x.old.slots[i]
			return dedupRef{id: s.id, expireMs: s.expireMs}, true
		}
	}
	return dedupRef{}, false
}

// put inserts or replaces h's entry.
func (x *dedupIndex) put(h dedupHash, r dedupRef) {
	if r.id == 0 || r.id == tombID {
		panic("fsm: dedup index: reserved message id")
	}
	// Grow first: growing turns cur into old, and h may be in it.
	if x.cur.used+1 > x.cur.limit() {
		x.grow()
	}
	if x.old.slots != nil {
		if i, ok := x.old.find(h); ok { // the old copy goes; the new one lands in cur
			x.old.slots[i].id = tombID
			x.n--
		}
		x.move(dedupMoveStep)
	}
	if x.cur.upsert(h, r) {
		x.n++
	}
}

// del removes h and returns what it held.
func (x *dedupIndex) del(h dedupHash) (dedupRef, bool) {
	if i, ok := x.cur.find(h); ok {
		s := x.cur.slots[i]
		x.cur.deleteAt(i)
		x.n--
		return dedupRef{id: s.id, expireMs: s.expireMs}, true
	}
	if x.old.slots != nil {
		if i, ok := x.old.find(h); ok {
			s := x.old.slots[i]
			x.old.slots[i].id = tombID
			x.n--
			return dedupRef{id: s.id, expireMs: s.expireMs}, true
		}
	}
	return dedupRef{}, false
}

// grow starts moving cur into a table twice its size. A move still under
// way is finished first; with dedupMoveStep that cannot happen, but an
// unfinished move must never be overwritten.
func (x *dedupIndex) grow() {
	if x.old.slots != nil {
		x.move(len(x.old.slots))
	}
	x.old = x.cur
	x.cur = newDedupTable(2 * len(x.old.slots))
	x.cursor = 0
}

// move carries up to k old slots into cur and frees the old table when it
// is done.
func (x *dedupIndex) move(k int) {
	end := min(x.cursor+k, len(x.old.slots))
	for ; x.cursor < end; x.cursor++ {
		s := &x.old.slots[x.cursor]
		if s.id == 0 || s.id == tombID {
			continue
		}
		x.cur.upsert(s.h, dedupRef{id: s.id, expireMs: s.expireMs})
		s.id = tombID
	}
	if x.cursor == len(x.old.slots) {
		x.old = dedupTable{}
		x.cursor = 0
	}
}

// dedupTable is one power-of-two array of slots.
type dedupTable struct {
	slots []dedupSlot
	mask  uint64
	used  int // occupied slots (cur never holds tombstones)
}

func newDedupTable(n int) dedupTable {
	return dedupTable{slots: make([]dedupSlot, n), mask: uint64(n - 1)}
}

// limit is the most occupied slots before the table grows: 3/4, where
// linear probing's miss still costs a few probes in adjacent cache lines.
func (t *dedupTable) limit() int { return len(t.slots) / 4 * 3 }

// home is h's first probe. The hash is a SHA-256 prefix, so its low bits
// are already uniform.
func (t *dedupTable) home(h *dedupHash) uint64 {
	return binary.LittleEndian.Uint64(h[:8]) & t.mask
}

func (t *dedupTable) find(h dedupHash) (int, bool) {
	for i := t.home(&h); ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		switch {
		case s.id == 0:
			return 0, false
		case s.id != tombID && s.h == h:
			return int(i), true
		}
	}
}

// upsert sets h's entry and reports whether h was new. Only for cur, which
// holds no tombstones, so the first empty slot ends the probe.
func (t *dedupTable) upsert(h dedupHash, r dedupRef) bool {
	for i := t.home(&h); ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		if s.id == 0 {
			*s = dedupSlot{h: h, id: r.id, expireMs: r.expireMs}
			t.used++
			return true
		}
		if s.h == h {
			s.id, s.expireMs = r.id, r.expireMs
			return false
		}
	}
}

// deleteAt empties slot i by shifting later entries of its probe run back
// (no tombstones, so a table that churns keys never fills with them).
func (t *dedupTable) deleteAt(i int) {
	hole := uint64(i)
	for j := (hole + 1) & t.mask; t.slots[j].id != 0; j = (j + 1) & t.mask {
		// The entry at j may fill the hole only if its home is not in
		// (hole, j], cyclically: otherwise its probe would no longer reach it.
		k := t.home(&t.slots[j].h)
		if (j-k)&t.mask >= (j-hole)&t.mask {
			t.slots[hole] = t.slots[j]
			hole = j
		}
	}
	t.slots[hole] = dedupSlot{}
	t.used--
}
