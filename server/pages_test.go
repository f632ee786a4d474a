package server

import "testing"

// A dead-letter cursor resumes every shard just after the last message
// listed in the order (death time, shard, id), and survives its token.
func TestDeadCursor(t *testing.T) {
	c := deadCursor{ms: 100, shard: 1, id: 7}
	for _, tc := range []struct {
		shard  uint32
		ms     int64
		fromID uint64
	}{
		{0, 101, 0}, // shard 0's messages of time 100 came before the cursor
		{1, 100, 8}, // the cursor's own shard goes on after its id
		{2, 100, 0}, // shard 2's messages of time 100 come after it
	} {
		if ms, id := c.from(tc.shard); ms != tc.ms || id != tc.fromID {
			t.Errorf("shard %d starts at (%d, %d), want (%d, %d)", tc.shard, ms, id, tc.ms, tc.fromID)
		}
	}
	got, err := parseDeadToken(c.token())
	if err != nil || got != c {
		t.Fatalf("token round trip: %+v %v", got, err)
	}
	if !c.before(deadCursor{ms: 100, shard: 2}) || c.before(deadCursor{ms: 100, shard: 1, id: 7}) || !(deadCursor{ms: 99, shard: 9}).before(c) {
		t.Error("order is not (time, shard, id)")
	}
	for _, bad := range []string{"", "!!", queuesToken("x"), "ZDE6MTox"} {
		if _, err := parseDeadToken(bad); err == nil {
			t.Errorf("parseDeadToken(%q) took it", bad)
		}
	}
	if name, err := parseQueuesToken(queuesToken("orders.eu")); err != nil || name != "orders.eu" {
		t.Fatalf("queues token: %q %v", name, err)
	}
}
