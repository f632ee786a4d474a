package ledger

import (
	"strings"
	"testing"
	"time"
)

// seq books bodies as one FIFO sequence, each acknowledged (or, for the
// bodies in unknown, with an unknown outcome).
func seq(l *Ledger, name string, unknown map[string]bool, bodies ...string) {
	for i, b := range bodies {
		l.Attempt(b)
		l.Sequenced(name, b)
		if unknown[b] {
			l.Sent(b, "", errUnsent)
			continue
		}
		l.Sent(b, "0-"+string(rune('a'+i)), nil)
	}
}

// Deliveries in send order pass, an unknown send in between is ignored
// wherever it lands, and a redelivery of an earlier message after a later
// one was first delivered is no violation: the first deliveries count.
func TestOrderInSendOrderPasses(t *testing.T) {
	l := New(vis)
	seq(l, "p0/g0", map[string]bool{"b": true}, "a", "b", "c")
	l.Delivered(delivery("a", "0-a", 1, 0))
	l.Delivered(delivery("b", "0-x", 2, 5*time.Second))
	l.Delivered(delivery("c", "0-c", 3, time.Second))
	l.Delivered(delivery("a", "0-a", 4, 2*vis))
	if v := l.Check(); len(v.OutOfOrder) != 0 {
		t.Fatalf("in-order history judged out of order: %v", v.OutOfOrder)
	}
}

// A later send delivered first, or delivered while an earlier one never
// was, is named.
func TestOrderViolationsAreCaught(t *testing.T) {
	for _, c := range []struct {
		name string
		run  func(l *Ledger)
		want string
	}{
		{"later first", func(l *Ledger) {
			l.Delivered(delivery("b", "0-b", 1, 0))
			l.Delivered(delivery("a", "0-a", 2, time.Second))
		}, "p0/g0: b first delivered 1s before the earlier a"},
		{"same receive", func(l *Ledger) {
			// One receive returning both: the second was leased while
			// the first was in flight.
			l.Delivered(delivery("a", "0-a", 1, 0))
			l.Delivered(delivery("b", "0-b", 2, 0))
		}, "b first delivered 0s before the earlier a"},
		{"earlier never", func(l *Ledger) {
			l.Delivered(delivery("b", "0-b", 1, 0))
		}, "p0/g0: b delivered, the earlier a never"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := New(vis)
			seq(l, "p0/g0", nil, "a", "b")
			c.run(l)
			err := l.Check().Err()
			if err == nil || !strings.Contains(err.Error(), "out of send order") || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("verdict %v, want out of order naming %q", err, c.want)
			}
		})
	}
}
