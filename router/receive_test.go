package router

import (
	"testing"

	"github.com/raftq/raftq/fsm"
)

func TestSplitAskNeverAsksMoreShardsThanSharesCanFill(t *testing.T) {
	ids := []uint32{0, 1, 2, 3, 4}
	cases := []struct {
		name   string
		want   int
		budget uint64
		now    int
	}{
		{"every shard gets at least one message", 3, 0, 3},
		{"all shards when want is large", 500, 0, 5},
		{"each share of the bytes holds a largest body", 500, 2 * fsm.MaxBodyBytes, 2},
		{"one shard even when the budget is below one body", 500, fsm.MaxBodyBytes / 2, 1},
		{"a large budget does not limit", 500, 64 * fsm.MaxBodyBytes, 5},
	}
	for _, c := range cases {
		now, later := splitAsk(ids, c.want, c.budget)
		if len(now) != c.now || len(now)+len(later) != len(ids) || (len(later) > 0 && later[0] != ids[len(now)]) {
			t.Errorf("%s: splitAsk(want %d, budget %d) = %v, %v; want the first %d now", c.name, c.want, c.budget, now, later, c.now)
		}
	}
}

func TestMayHoldMore(t *testing.T) {
	const kib = 1 << 10
	cases := []struct {
		name string
		a    asked
		n    int
		got  uint64
		want bool
	}{
		{"filled its share", asked{share: 10}, 10, 10 * kib, true},
		{"ran short of its share", asked{share: 10}, 4, 4 * kib, false},
		{"leased nothing", asked{share: 10, byteShare: 100}, 0, 0, false},
		{"next body might not fit the bytes", asked{share: 10, byteShare: fsm.MaxBodyBytes}, 1, kib, true},
		{"room for any body left: drained", asked{share: 10, byteShare: 4 * fsm.MaxBodyBytes}, 3, 3 * kib, false},
	}
	for _, c := range cases {
		if got := c.a.mayHoldMore(c.n, c.got); got != c.want {
			t.Errorf("%s: mayHoldMore(%d, %d) with %+v = %v, want %v", c.name, c.n, c.got, c.a, got, c.want)
		}
	}
}
