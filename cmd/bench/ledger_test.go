package main

import (
	"slices"
	"testing"
	"time"
)

// mustLedger sends n messages from each of producers, acking all but the
// seqs in unknown.
func mustLedger(t *testing.T, producers, n int, unknown map[uint64]bool) *ledger {
	t.Helper()
	l := newLedger(producers)
	for p := range producers {
		for range n {
			s := l.next(p)
			l.sent(p, s, !unknown[s])
		}
	}
	return l
}

func TestLedgerVerdicts(t *testing.T) {
	type delivery struct {
		p   uint32
		seq uint64
	}
	cases := []struct {
		name       string
		unknown    map[uint64]bool
		deliveries []delivery
		want       tally
		missing    []string
	}{
		{
			name:       "all delivered once",
			deliveries: []delivery{{0, 0}, {0, 1}, {0, 2}, {1, 0}, {1, 1}, {1, 2}},
			want:       tally{Acked: 6, Delivered: 6},
		},
		{
			name:       "one lost",
			deliveries: []delivery{{0, 0}, {0, 1}, {0, 2}, {1, 0}, {1, 2}},
			want:       tally{Acked: 6, Delivered: 5, Lost: 1},
			missing:    []string{"1/1"},
		},
		{
			name:       "duplicates counted, not lost",
			deliveries: []delivery{{0, 0}, {0, 0}, {0, 0}, {0, 1}, {0, 2}, {1, 0}, {1, 1}, {1, 2}, {1, 2}},
			want:       tally{Acked: 6, Delivered: 6, Duplicates: 3},
		},
		{
			name:       "unknown send is never lost",
			unknown:    map[uint64]bool{1: true},
			deliveries: []delivery{{0, 0}, {0, 2}, {1, 0}, {1, 1}, {1, 2}},
			want:       tally{Acked: 4, Unknown: 2, Delivered: 5},
		},
		{
			name:       "foreign deliveries",
			deliveries: []delivery{{0, 0}, {0, 1}, {0, 2}, {1, 0}, {1, 1}, {1, 2}, {7, 0}, {0, 99}},
			want:       tally{Acked: 6, Delivered: 6, Foreign: 2},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := mustLedger(t, 2, 3, tc.unknown)
			for _, d := range tc.deliveries {
				l.delivered(header{Producer: d.p, Seq: d.seq})
			}
			if got := l.tally(); got != tc.want {
				t.Errorf("tally = %+v, want %+v", got, tc.want)
			}
			if got := l.outstanding(); got != tc.want.Lost {
				t.Errorf("outstanding = %d, want %d (= lost after the drain)", got, tc.want.Lost)
			}
			if got := l.missing(10); !slices.Equal(got, tc.missing) {
				t.Errorf("missing = %v, want %v", got, tc.missing)
			}
		})
	}
}

// A delivery can beat the send's acknowledgement back to the producer; it
// must not leave the message counted as outstanding.
func TestLedgerDeliveryBeforeAck(t *testing.T) {
	l := newLedger(1)
	s := l.next(0)
	if !l.delivered(header{Seq: s}) {
		t.Fatal("first delivery reported as a duplicate")
	}
	l.sent(0, s, true)
	if got := l.outstanding(); got != 0 {
		t.Fatalf("outstanding = %d after delivery then ack, want 0", got)
	}
	if l.delivered(header{Seq: s}) {
		t.Fatal("second delivery reported as first")
	}
	if got := l.tally(); got.Lost != 0 || got.Duplicates != 1 {
		t.Fatalf("tally = %+v, want no loss and one duplicate", got)
	}
}

func TestPayloadRoundTrip(t *testing.T) {
	fill := filler(7, 1024)
	if !slices.Equal(fill, filler(7, 1024)) {
		t.Fatal("filler is not deterministic for a seed")
	}
	if slices.Equal(fill, filler(8, 1024)) {
		t.Fatal("different seeds gave the same filler")
	}
	h := header{Producer: 3, Seq: 1 << 40, Sent: time.Unix(0, 1_700_000_000_123_456_789)}
	b := encode(h, fill)
	if len(b) != 1024 {
		t.Fatalf("body is %d bytes, want 1024", len(b))
	}
	got, err := decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Producer != h.Producer || got.Seq != h.Seq || !got.Sent.Equal(h.Sent) {
		t.Fatalf("decode = %+v, want %+v", got, h)
	}
	for _, bad := range [][]byte{nil, b[:10], append([]byte("nope"), b[4:]...)} {
		if _, err := decode(bad); err == nil {
			t.Errorf("decode(%q...) accepted a foreign body", bad[:min(len(bad), 8)])
		}
	}
}

func TestEncodeIntoReusesOnlyABodyOfThisRun(t *testing.T) {
	fill := filler(7, 1024)
	first := encode(header{Producer: 1, Seq: 1, Sent: time.Unix(0, 10)}, fill)
	h := header{Producer: 2, Seq: 99, Sent: time.Unix(0, 20)}
	again := encodeInto(first, h, fill)
	if &again[0] != &first[0] {
		t.Fatal("a body of this run's size was not reused")
	}
	if want := encode(h, fill); !slices.Equal(again, want) {
		t.Fatal("a reused body differs from a new one with the same header")
	}
	for _, buf := range [][]byte{nil, make([]byte, 512), make([]byte, 2048)} {
		b := encodeInto(buf, h, fill)
		if len(b) != 1024 || (len(buf) > 0 && &b[0] == &buf[0]) {
			t.Fatalf("encodeInto on a %d-byte buffer gave %d bytes (reused %v)", len(buf), len(b), len(buf) > 0 && &b[0] == &buf[0])
		}
		if got, err := decode(b); err != nil || got.Seq != 99 {
			t.Fatalf("decode = %+v, %v", got, err)
		}
	}
}

// A refused send is not stored: never lost, never outstanding, and a
// delivery of one is counted as a refusal that stored it after all.
func TestLedgerRefused(t *testing.T) {
	l := newLedger(1)
	first := l.nextN(0, 4)
	if first != 0 {
		t.Fatalf("nextN = %d, want 0", first)
	}
	l.book(0, []uint64{0, 1, 2, 3}, []sendState{sendAcked, sendRefused, sendRefused, sendUnknown})
	if got := l.outstanding(); got != 1 {
		t.Fatalf("outstanding = %d, want 1 (the acked send)", got)
	}
	l.delivered(header{Producer: 0, Seq: 0})
	l.delivered(header{Producer: 0, Seq: 2})
	want := tally{Acked: 1, Unknown: 1, Delivered: 2, Refused: 2, RefusedDelivered: 1}
	if got := l.tally(); got != want {
		t.Fatalf("tally = %+v, want %+v", got, want)
	}
	if got := l.outstanding(); got != 0 {
		t.Errorf("outstanding = %d after the acked send's delivery", got)
	}
	if s := l.nextN(0, 2); s != 4 {
		t.Errorf("nextN after 4 = %d, want 4", s)
	}
}
