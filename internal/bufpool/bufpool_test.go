package bufpool

import "testing"

// A buffer is the next power of two at or above the length asked for,
// never gRPC's default 1 MiB tier for a mid-sized message.
func TestGetSizesToTheNextPowerOfTwo(t *testing.T) {
	p := New()
	for _, tc := range []struct{ n, wantCap int }{
		{100, 256},
		{4 << 10, 4 << 10},
		{40 << 10, 64 << 10},
		{200 << 10, 256 << 10},
		{(1 << 20) + 1, 2 << 20},
		{4 << 20, 4 << 20},
	} {
		b := p.Get(tc.n)
		if len(*b) != tc.n || cap(*b) != tc.wantCap {
			t.Errorf("Get(%d): len %d cap %d, want len %d cap %d", tc.n, len(*b), cap(*b), tc.n, tc.wantCap)
		}
		p.Put(b)
	}
}

// A reused buffer comes back cleared: the pool must not leak one message's
// bytes into the next.
func TestReusedBufferIsCleared(t *testing.T) {
	p := New()
	for range 100 { // sync.Pool may drop a Put; try until one is reused
		b := p.Get(40 << 10)
		for i := range *b {
			(*b)[i] = 0xff
		}
		p.Put(b)
		c := p.Get(33 << 10) // same 64 KiB tier
		full := (*c)[:cap(*c)]
		reused := cap(*c) == 64<<10 && &full[0] == &(*b)[:1][0]
		for i, v := range full {
			if v != 0 {
				t.Fatalf("byte %d of a reused buffer is %#x, want 0", i, v)
			}
		}
		if reused {
			return
		}
	}
	// The race detector drops a quarter of Puts at random; 100 misses in a
	// row would mean the pool does not reuse buffers at all.
	t.Fatal("the pool never returned a buffer that was put back")
}
