package wire

import (
	"errors"
	"testing"
)

func TestMessageIDRoundTrip(t *testing.T) {
	for _, m := range []MessageID{{0, 1}, {7, 500}, {0xffffffff, ^uint64(0)}} {
		got, err := ParseMessageID(m.String())
		if err != nil || got != m {
			t.Fatalf("round trip %v: got %v, %v", m, got, err)
		}
	}
}

func TestParseMessageIDRejects(t *testing.T) {
	for _, s := range []string{"", "-", "1-", "-1", "x-1", "1-0", "1-zz", "100000000-1", "1-1-1"} {
		if _, err := ParseMessageID(s); !errors.Is(err, ErrBadID) {
			t.Errorf("ParseMessageID(%q) = %v, want ErrBadID", s, err)
		}
	}
}

func TestReceiptRoundTrip(t *testing.T) {
	for _, r := range []Receipt{{Shard: 0, ID: 1, Epoch: 1}, {Shard: 3, ID: 99, Epoch: 12345, Term: 7}, {Shard: 0xffffffff, ID: ^uint64(0), Epoch: ^uint64(0), Term: ^uint64(0)}, {Shard: 0xffffffff, ID: ^uint64(0), Epoch: ^uint64(0), Term: ^uint64(0), Signed: true, Key: 0xffffffff, Sig: [SigLen]byte{1, 2, 3, 255}}, {Shard: 2, ID: 5, Epoch: 9, Signed: true}} {
		got, err := ParseReceipt(r.String())
		if err != nil || got != r {
			t.Fatalf("round trip %v: got %v, %v", r, got, err)
		}
	}
}

func TestParseReceiptRejects(t *testing.T) {
	good := Receipt{Shard: 1, ID: 2, Epoch: 3, Term: 4}.String()
	signed := Receipt{Shard: 1, ID: 2, Epoch: 3, Term: 4, Signed: true, Key: 7}.String()
	for _, s := range []string{"", "!!!", good + "A", good[:len(good)-2], "AA", signed[:len(signed)-3], signed + "AAAA", Receipt{Shard: 1, ID: 0, Epoch: 1}.String(), Receipt{Shard: 1, ID: 1, Epoch: 0}.String()} {
		if _, err := ParseReceipt(s); !errors.Is(err, ErrBadReceipt) {
			t.Errorf("ParseReceipt(%q) = %v, want ErrBadReceipt", s, err)
		}
	}
}

func FuzzParseReceipt(f *testing.F) {
	f.Add(Receipt{Shard: 1, ID: 2, Epoch: 3}.String())
	f.Add(Receipt{Shard: 1, ID: 2, Epoch: 3, Signed: true, Key: 9}.String())
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseReceipt(s)
		if err != nil {
			return
		}
		if again, err := ParseReceipt(r.String()); err != nil || again != r {
			t.Fatalf("re-encode of %q: %v %v", s, again, err)
		}
	})
}

func TestShardForStableAndSpread(t *testing.T) {
	// Pinned values: changing the hash would move groups between shards of
	// a live cluster and break per-group order.
	for _, c := range []struct {
		queue, group string
		n, want      uint32
	}{{"orders", "customer-1", 8, 6}, {"orders", "", 8, 4}, {"jobs", "g7", 16, 5}} {
		if got := ShardFor(c.queue, c.group, c.n); got != c.want {
			t.Fatalf("ShardFor(%q, %q, %d) = %d, want %d", c.queue, c.group, c.n, got, c.want)
		}
	}
	counts := make([]int, 8)
	for i := 0; i < 8000; i++ {
		counts[ShardFor("q", string(rune('a'+i%26))+string(rune(i)), 8)]++
	}
	for s, c := range counts {
		if c < 700 || c > 1300 {
			t.Fatalf("shard %d got %d of 8000 groups: poor spread %v", s, c, counts)
		}
	}
	if ShardFor("a", "bc", 1<<20) == ShardFor("ab", "c", 1<<20) {
		t.Fatal("queue/group boundary not separated")
	}
}

func TestShardForMessage(t *testing.T) {
	if s, ok := ShardForMessage("q", "g", "k", 8); !ok || s != ShardFor("q", "g", 8) {
		t.Fatalf("group must win: %d %v", s, ok)
	}
	a, ok1 := ShardForMessage("q", "", "key-1", 8)
	b, ok2 := ShardForMessage("q", "", "key-1", 8)
	if !ok1 || !ok2 || a != b {
		t.Fatalf("dedup key must pin a shard: %d %d", a, b)
	}
	if _, ok := ShardForMessage("q", "", "", 8); ok {
		t.Fatal("ungrouped, undeduplicated message must be free to balance")
	}
}
