package fsm

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
)

// hashAt builds a key whose first probe in a table of any size ≥ the
// position's is pos, told apart from others by tag.
func hashAt(pos, tag uint64) dedupHash {
	var h dedupHash
	binary.LittleEndian.PutUint64(h[:8], pos)
	binary.LittleEndian.PutUint64(h[8:], tag)
	return h
}

// checkIndex compares x with the reference and checks the invariants the
// probing relies on.
func checkIndex(t *testing.T, x *dedupIndex, ref map[dedupHash]dedupRef) {
	t.Helper()
	if x.len() != len(ref) {
		t.Fatalf("len = %d, want %d", x.len(), len(ref))
	}
	for h, want := range ref {
		got, ok := x.get(h)
		if !ok || got != want {
			t.Fatalf("get(%x) = %v, %v; want %v", h[:8], got, ok, want)
		}
	}
	used := 0
	for i, s := range x.cur.slots {
		switch {
		case s.id == tombID:
			t.Fatalf("tombstone in the current table at %d", i)
		case s.id != 0:
			used++
			if _, ok := ref[s.h]; !ok {
				t.Fatalf("slot %d holds a key that was deleted", i)
			}
			if x.old.slots != nil {
				if _, dup := x.old.find(s.h); dup {
					t.Fatalf("key at slot %d is in both tables", i)
				}
			}
		}
	}
	if used != x.cur.used {
		t.Fatalf("current table counts %d used slots, holds %d", x.cur.used, used)
	}
}

func TestDedupIndexMatchesAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	x := newDedupIndex()
	ref := map[dedupHash]dedupRef{}
	var keys []dedupHash
	nextID := uint64(1)
	grows, midMove := 0, 0
	// 400 k operations, mostly inserts: the table grows from 1,024 slots
	// past the size that is mapped off the heap, with deletes and
	// replacements throughout, including while a move is under way.
	for op := range 400_000 {
		before := len(x.cur.slots)
		switch r := rng.IntN(10); {
		case r < 6 || len(keys) == 0:
			var h dedupHash
			binary.LittleEndian.PutUint64(h[:8], rng.Uint64())
			binary.LittleEndian.PutUint64(h[8:], rng.Uint64())
			ref[h] = dedupRef{id: nextID, expireMs: int64(op)}
			x.put(h, ref[h])
			keys = append(keys, h)
			nextID++
		case r < 8: // delete a live or an already deleted key
			i := rng.IntN(len(keys))
			h := keys[i]
			want, live := ref[h]
			got, ok := x.del(h)
			if ok != live || got != want {
				t.Fatalf("op %d: del = %v, %v; want %v, %v", op, got, ok, want, live)
			}
			delete(ref, h)
			keys[i] = keys[len(keys)-1]
			keys = keys[:len(keys)-1]
		case r < 9: // replace (an expired key taken again)
			h := keys[rng.IntN(len(keys))]
			if _, live := ref[h]; live {
				ref[h] = dedupRef{id: nextID, expireMs: int64(op)}
				x.put(h, ref[h])
				nextID++
			}
		default:
			var h dedupHash
			binary.LittleEndian.PutUint64(h[:8], rng.Uint64())
			if _, ok := x.get(h); ok {
				t.Fatalf("op %d: get of a key never put succeeded", op)
			}
		}
		if len(x.cur.slots) != before {
			grows++
		}
		if x.old.slots != nil && op%499 == 0 {
			midMove++
			checkIndex(t, x, ref)
		} else if op%20_000 == 0 {
			checkIndex(t, x, ref)
		}
	}
	checkIndex(t, x, ref)
	if grows < 6 {
		t.Fatalf("table grew %d times; the test must cover several moves", grows)
	}
	if midMove < 5 {
		t.Fatalf("checked the index %d times while a move was under way; want several", midMove)
	}
	if x.cur.used > x.cur.limit() {
		t.Fatalf("table %d/%d full, over its limit", x.cur.used, len(x.cur.slots))
	}
}

// Backward-shift deletion must keep every key of a probe run reachable,
// also when the run wraps past the table's end.
func TestDedupIndexDeleteInWrappedRun(t *testing.T) {
	x := newDedupIndex()
	n := uint64(len(x.cur.slots))
	ref := map[dedupHash]dedupRef{}
	// A run starting 3 slots before the end, with keys homed at its start,
	// at the last slot and at slot 0, interleaved.
	homes := []uint64{n - 3, n - 3, n - 1, 0, n - 3, 0, n - 1, 1}
	for i, pos := range homes {
		h := hashAt(pos, uint64(i))
		ref[h] = dedupRef{id: uint64(i + 1), expireMs: int64(i)}
		x.put(h, ref[h])
	}
	checkIndex(t, x, ref)
	for i := range homes {
		// Delete in an order that shifts entries across the wrap.
		h := hashAt(homes[(i*3)%len(homes)], uint64((i*3)%len(homes)))
		if _, ok := x.del(h); !ok {
			t.Fatalf("del %d: key not found", i)
		}
		delete(ref, h)
		checkIndex(t, x, ref)
	}
	for i, s := range x.cur.slots {
		if s.id != 0 {
			t.Fatalf("slot %d not empty after every key was deleted", i)
		}
	}
}

func TestDedupIndexRefusesReservedIDs(t *testing.T) {
	for _, id := range []uint64{0, tombID} {
		t.Run(fmt.Sprint(id), func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("put with a reserved id did not panic")
				}
			}()
			newDedupIndex().put(hashAt(1, 1), dedupRef{id: id})
		})
	}
}

// Per enqueue of a keyed message at a steady window: one miss, one insert
// and the expiry of the oldest key. Compare with BenchmarkDedupGoMap.
func BenchmarkDedupIndex(b *testing.B) {
	for _, n := range []int{100_000, 4_000_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			x := newDedupIndex()
			benchDedupChurn(b, n, func(h dedupHash, id uint64) bool {
				if _, ok := x.get(h); ok {
					return false
				}
				x.put(h, dedupRef{id: id})
				return true
			}, func(h dedupHash) { x.del(h) })
		})
	}
}

func BenchmarkDedupGoMap(b *testing.B) {
	for _, n := range []int{100_000, 4_000_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			m := map[dedupHash]dedupRef{}
			benchDedupChurn(b, n, func(h dedupHash, id uint64) bool {
				if _, ok := m[h]; ok {
					return false
				}
				m[h] = dedupRef{id: id}
				return true
			}, func(h dedupHash) { delete(m, h) })
		})
	}
}

// benchDedupChurn fills n keys, then times add-newest, drop-oldest.
func benchDedupChurn(b *testing.B, n int, add func(dedupHash, uint64) bool, drop func(dedupHash)) {
	key := func(i int) dedupHash { return hashDedup("q", fmt.Sprint(i)) }
	for i := range n {
		add(key(i), uint64(i+1))
	}
	// Keys are hashed outside the timer: hashDedup has its own benchmark.
	const pre = 1 << 16
	keys := make([]dedupHash, pre)
	for i := range keys {
		keys[i] = key(n + i)
	}
	old := make([]dedupHash, pre)
	for i := range old {
		old[i] = key(i)
	}
	b.ResetTimer()
	for i := range b.N {
		if i%pre == 0 && i > 0 {
			b.StopTimer()
			for j := range keys {
				keys[j] = key(n + i + j)
				old[j] = key(i + j)
			}
			b.StartTimer()
		}
		if !add(keys[i%pre], uint64(n+i+1)) {
			b.Fatal("fresh key found")
		}
		drop(old[i%pre])
	}
}
