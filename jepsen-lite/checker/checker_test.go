package checker

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/raftq/raftq/jepsen-lite/history"
)

// builder writes histories by hand: each call appends an invoke and its
// completion, 1 ms apart.
type builder struct {
	ops []history.Op
	t   int64
}

func (b *builder) add(op history.Op) {
	b.t += 1_000_000
	op.Time = b.t
	op.Index = int64(len(b.ops))
	b.ops = append(b.ops, op)
}

func (b *builder) pair(inv history.Op, done history.Op) {
	inv.Type = history.Invoke
	b.add(inv)
	done.F, done.Process = inv.F, inv.Process
	b.add(done)
}

func (b *builder) enqueue(p int, q, group, value, typ, id string) {
	b.pair(history.Op{F: history.FEnqueue, Process: p, Queue: q, Group: group, Value: value, DedupKey: "k-" + value},
		history.Op{Type: typ, MessageID: id})
}

func (b *builder) receive(p int, q string, ds ...history.Delivery) {
	b.pair(history.Op{F: history.FReceive, Process: p, Queue: q, VisibilityMs: 500},
		history.Op{Type: history.OK, Deliveries: ds})
}

func (b *builder) ack(p int, id string, epoch uint64, typ string) {
	b.pair(history.Op{F: history.FAck, Process: p, MessageID: id, Epoch: epoch},
		history.Op{Type: typ})
}

func (b *builder) extend(p int, id string, epoch uint64, deadline int64) {
	b.pair(history.Op{F: history.FExtend, Process: p, MessageID: id, Epoch: epoch, VisibilityMs: 500},
		history.Op{Type: history.OK, DeadlineMs: deadline})
}

func (b *builder) final(id string, rec history.Record) {
	b.add(history.Op{Type: history.OK, F: history.FFinal, Process: 99, MessageID: id, Final: &rec})
}

// dl is a delivery granted at shard time start with the test's 500 ms lease.
func dl(id, value string, epoch uint64, start int64, group string) history.Delivery {
	return history.Delivery{MessageID: id, Epoch: epoch, DeadlineMs: start + 500, Value: value, Group: group, Receipt: "r"}
}

// clean is a history every checker must accept: plain delivery and ack, a
// redelivery after expiry with the stale ack rejected, a lease extension, a
// crashed consumer, an indeterminate enqueue that shows up, one that does
// not, a failed enqueue, a dead-lettered message and a FIFO group in order.
func clean() *builder {
	b := &builder{}
	b.enqueue(1, "q", "", "v1", history.OK, "0-1")
	b.enqueue(1, "q", "", "v2", history.OK, "0-2")
	b.enqueue(1, "q", "", "v3", history.Info, "")
	b.enqueue(2, "q", "", "v4", history.Info, "")
	b.enqueue(2, "q", "", "v5", history.Fail, "")
	b.enqueue(2, "q", "", "v6", history.OK, "0-6")
	// v1: straightforward.
	b.receive(3, "q", dl("0-1", "v1", 1, 1000, ""))
	b.ack(3, "0-1", 1, history.OK)
	// v2: process 4 holds epoch 2 and extends to 1800; it expires; process 5
	// gets epoch 5 at 1800 (exactly the deadline: allowed) and acks; the
	// late ack of epoch 2 is rejected.
	b.receive(4, "q", dl("0-2", "v2", 2, 1000, ""))
	b.extend(4, "0-2", 2, 1800)
	b.receive(5, "q", dl("0-2", "v2", 5, 1800, ""))
	b.ack(5, "0-2", 5, history.OK)
	b.ack(4, "0-2", 2, history.Fail)
	// v3 (indeterminate) was applied after all.
	b.receive(6, "q", dl("0-3", "v3", 3, 1100, ""))
	b.ack(6, "0-3", 3, history.OK)
	// v6: dead-lettered after a poison.
	b.receive(7, "q", dl("0-6", "v6", 4, 1200, ""))
	// FIFO group g: a, b, c in order, b redelivered once.
	b.enqueue(8, "f", "g", "a", history.OK, "1-1")
	b.enqueue(8, "f", "g", "b", history.OK, "1-2")
	b.enqueue(8, "f", "g", "c", history.OK, "1-3")
	b.receive(9, "f", dl("1-1", "a", 1, 1000, "g"))
	b.ack(9, "1-1", 1, history.OK)
	b.receive(9, "f", dl("1-2", "b", 2, 1100, "g"))
	b.receive(10, "f", dl("1-2", "b", 3, 1600, "g"))
	b.ack(10, "1-2", 3, history.OK)
	b.receive(10, "f", dl("1-3", "c", 4, 1700, "g"))
	b.ack(10, "1-3", 4, history.OK)
	b.final("0-1", history.Record{State: history.StateAcked, Attempts: []history.Attempt{{Epoch: 1, ReceivedMs: 1000, EndedMs: 1100, Outcome: history.OutAcked}}})
	b.final("0-2", history.Record{State: history.StateAcked, LeaseEpoch: 5, LeaseDeadMs: 2300, Attempts: []history.Attempt{
		{Epoch: 2, ReceivedMs: 1000, EndedMs: 1850, Outcome: history.OutExpired},
		{Epoch: 5, ReceivedMs: 1800, EndedMs: 1900, Outcome: history.OutAcked}}})
	b.final("1-1", history.Record{State: history.StateAcked, Attempts: []history.Attempt{{Epoch: 1, ReceivedMs: 1000, EndedMs: 1050, Outcome: history.OutAcked}}})
	b.final("0-6", history.Record{State: history.StateDead, Attempts: []history.Attempt{{Epoch: 4, ReceivedMs: 1200, EndedMs: 1300, Outcome: "POISON"}}})
	return b
}

func check(t *testing.T, ops []history.Op) map[string]Result {
	t.Helper()
	out := map[string]Result{}
	for _, r := range Check(ops, Options{FIFOQueues: map[string]bool{"f": true}}) {
		out[r.Name] = r
	}
	return out
}

func TestCleanHistoryPasses(t *testing.T) {
	rs := check(t, clean().ops)
	for _, r := range rs {
		if !r.Valid {
			t.Errorf("%s flagged a clean history: %v", r.Name, r.Violations)
		}
	}
	// The clean history exercises the allowed cases, so their counts show.
	want := []struct {
		checker, count string
		n              int
	}{
		{"total-queue", "acked", 5},
		{"total-queue", "dead-lettered", 1},
		{"total-queue", "redelivered", 2},
		{"total-queue", "recovered-indeterminate", 1},
		{"total-queue", "lost-indeterminate", 1},
		{"stale-ack", "stale-rejected", 1},
		{"order", "checked", 3},
		{"lease", "regrants", 2},
	}
	for _, w := range want {
		if got := rs[w.checker].Count[w.count]; got != w.n {
			t.Errorf("%s %s = %d, want %d", w.checker, w.count, got, w.n)
		}
	}
}

// drop removes the operations (invoke and completion) that match.
func drop(ops []history.Op, match func(history.Op) bool) []history.Op {
	var out []history.Op
	for _, op := range ops {
		if !match(op) {
			out = append(out, op)
		}
	}
	return out
}

func TestMutatedHistoriesAreFlagged(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(b *builder) []history.Op
		checker string
		kind    string
	}{
		{"lost message", func(b *builder) []history.Op {
			// v1 was acknowledged to the producer but nobody ever saw it.
			return drop(b.ops, func(op history.Op) bool {
				return op.MessageID == "0-1" && op.F != history.FEnqueue || len(op.Deliveries) > 0 && op.Deliveries[0].MessageID == "0-1"
			})
		}, "total-queue", "lost"},
		{"unfinished message", func(b *builder) []history.Op {
			// v1 delivered, the ack never succeeded, and the final record says
			// it is still leased.
			ops := drop(b.ops, func(op history.Op) bool {
				return op.F == history.FAck && op.MessageID == "0-1" || op.F == history.FFinal && op.MessageID == "0-1"
			})
			b.ops = ops
			b.final("0-1", history.Record{State: history.StateLeased})
			return b.ops
		}, "total-queue", "unfinished"},
		{"double lease", func(b *builder) []history.Op {
			// Epoch 5 granted at 1700, before epoch 2's extended deadline 1800.
			b.receive(11, "q", dl("0-2", "v2", 7, 1700, ""))
			return b.ops
		}, "lease", "double-lease"},
		{"double lease from server history", func(b *builder) []history.Op {
			ops := drop(b.ops, func(op history.Op) bool { return op.F == history.FFinal && op.MessageID == "0-1" })
			b.ops = ops
			b.final("0-1", history.Record{State: history.StateAcked, Attempts: []history.Attempt{
				{Epoch: 1, ReceivedMs: 1000, EndedMs: 1600, Outcome: history.OutExpired},
				{Epoch: 9, ReceivedMs: 1400, EndedMs: 1700, Outcome: history.OutAcked}}})
			return b.ops
		}, "lease", "double-lease"},
		{"one epoch to two clients", func(b *builder) []history.Op {
			b.receive(12, "q", dl("0-1", "v1", 1, 1000, ""))
			return b.ops
		}, "lease", "epoch-twice"},
		{"group reorder", func(b *builder) []history.Op {
			// c delivered (epoch 0 < b's epochs) before b.
			for i := range b.ops {
				for j := range b.ops[i].Deliveries {
					if b.ops[i].Deliveries[j].Value == "c" {
						b.ops[i].Deliveries[j].Epoch = 0
					}
				}
			}
			return drop(b.ops, func(op history.Op) bool { return op.F == history.FAck && op.MessageID == "1-3" })
		}, "order", "reordered"},
		{"two in flight in a group", func(b *builder) []history.Op {
			// c leased at 1650 while b's epoch 3 lease (1600..2100) holds.
			for i := range b.ops {
				for j := range b.ops[i].Deliveries {
					if b.ops[i].Deliveries[j].Value == "c" {
						b.ops[i].Deliveries[j].DeadlineMs = 1650 + 500
					}
				}
			}
			return drop(b.ops, func(op history.Op) bool { return op.F == history.FAck && op.MessageID == "1-2" })
		}, "order", "two-in-flight"},
		{"group acks out of order", func(b *builder) []history.Op {
			// a's only successful ack comes after c's.
			ops := drop(b.ops, func(op history.Op) bool { return op.F == history.FAck && op.MessageID == "1-1" })
			b.ops = ops
			b.ack(9, "1-1", 1, history.OK)
			return b.ops
		}, "order", "ack-reordered"},
		{"dedup break", func(b *builder) []history.Op {
			// A retry of v1 with the same key got a second id.
			b.enqueue(1, "q", "", "v1", history.OK, "0-77")
			return b.ops
		}, "dedup", "dup-ids"},
		{"resurrection", func(b *builder) []history.Op {
			b.receive(13, "q", dl("0-1", "v1", 8, 5000, ""))
			return b.ops
		}, "total-queue", "resurrected"},
		{"stale ack accepted", func(b *builder) []history.Op {
			for i := range b.ops {
				if b.ops[i].F == history.FAck && b.ops[i].Process == 4 && b.ops[i].Type == history.Fail {
					b.ops[i].Type = history.OK
				}
			}
			return b.ops
		}, "stale-ack", "stale-accepted"},
		{"failed enqueue delivered", func(b *builder) []history.Op {
			b.receive(14, "q", dl("0-5", "v5", 9, 3000, ""))
			return b.ops
		}, "total-queue", "delivered-failed"},
		{"unexpected value", func(b *builder) []history.Op {
			b.receive(14, "q", dl("0-50", "nobody-sent-me", 9, 3000, ""))
			return b.ops
		}, "total-queue", "unexpected"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs := check(t, tt.mutate(clean()))
			r := rs[tt.checker]
			if r.Valid || r.Count[tt.kind] == 0 {
				t.Fatalf("%s did not flag %s: %s", tt.checker, tt.kind, r.Summary())
			}
			if !strings.Contains(strings.Join(r.Violations, "\n"), tt.kind) {
				t.Errorf("violations do not name %s: %v", tt.kind, r.Violations)
			}
		})
	}
}

// A history survives the JSON-lines round trip with the same verdicts.
func TestHistoryRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	for _, op := range clean().ops {
		b, err := json.Marshal(op)
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(append(b, '\n'))
	}
	ops, err := history.Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) != len(clean().ops) {
		t.Fatalf("read %d ops, wrote %d", len(ops), len(clean().ops))
	}
	for _, r := range check(t, ops) {
		if !r.Valid {
			t.Errorf("%s after round trip: %v", r.Name, r.Violations)
		}
	}
}

// A lease re-granted sooner in real time than the holder's visibility
// timeout (a fast leader clock) is noted, not flagged: the contract is on
// the shard clock, where the grants do not overlap.
func TestRealTimeEarlyExpiryIsANoteNotAViolation(t *testing.T) {
	b := &builder{}
	b.enqueue(1, "q", "", "v", history.OK, "0-1")
	b.receive(2, "q", dl("0-1", "v", 1, 1000, "")) // 500 ms lease, holder keeps working
	b.receive(3, "q", dl("0-1", "v", 2, 1500, "")) // 1 ms later in real time
	b.ack(3, "0-1", 2, history.OK)
	rs := check(t, b.ops)
	l := rs["lease"]
	if !l.Valid {
		t.Fatalf("lease flagged a shard-clock-clean history: %v", l.Violations)
	}
	if l.Count["early-expiry-realtime"] != 1 || len(l.Notes) != 1 {
		t.Errorf("early expiry not noted: %s %v", l.Summary(), l.Notes)
	}
}
