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
	// As the clients do (workload/client.go), a completion repeats what
	// its invoke was about.
	done.F, done.Process, done.Queue = inv.F, inv.Process, inv.Queue
	if done.MessageID == "" {
		done.MessageID, done.Epoch = inv.MessageID, inv.Epoch
	}
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

func (b *builder) phase(typ, name string, op history.Op) {
	op.Type, op.F, op.Process, op.Fault = typ, history.FPhase, history.NemesisProcess, name
	b.add(op)
}

// fault records one fault of kind as the nemesis does: invoke, ok once
// applied, info once undone.
func (b *builder) fault(kind, desc string) {
	for _, op := range []history.Op{{Type: history.Invoke, Fault: desc}, {Type: history.OK, Fault: desc}, {Type: history.Info, Fault: "end " + desc}} {
		op.F, op.Process, op.Kind = history.FNemesis, history.NemesisProcess, kind
		b.add(op)
	}
}

// setup is the clean history's run: partition and kill requested, two
// shards of three replicas, the nodes' default clock bound.
func setup() *history.Setup {
	return &history.Setup{Nemesis: []string{"partition", "kill"}, Nodes: 3, Shards: 2, Replication: 3, ClockBoundMs: 500,
		Queues: []history.QueueSetup{{Name: "q", VisibilityMs: 500, MaxReceives: 3}, {Name: "f", FIFO: true, VisibilityMs: 500, MaxReceives: 3}}}
}

// replicas is a converged, equal comparison of the setup's two shards.
func replicas() []history.ShardReplicas {
	var out []history.ShardReplicas
	for s := range uint32(2) {
		out = append(out, history.ShardReplicas{Shard: s, Leader: "n1", Replicas: []string{"n1", "n2", "n3"},
			Applied: map[string]uint64{"n1": 40, "n2": 40, "n3": 40},
			Digests: map[string]string{"n1": "40:aa", "n2": "40:aa", "n3": "40:aa"}})
	}
	return out
}

// mutateOps changes every op that match selects.
func mutateOps(ops []history.Op, match func(history.Op) bool, change func(*history.Op)) []history.Op {
	for i := range ops {
		if match(ops[i]) {
			change(&ops[i])
		}
	}
	return ops
}

func isPhase(name string) func(history.Op) bool {
	return func(op history.Op) bool { return op.F == history.FPhase && op.Fault == name }
}

func isFinal(id string) func(history.Op) bool {
	return func(op history.Op) bool { return op.F == history.FFinal && op.MessageID == id }
}

// dl is a delivery granted at shard time start with the test's 500 ms lease.
func dl(id, value string, epoch uint64, start int64, group string) history.Delivery {
	return history.Delivery{MessageID: id, Epoch: epoch, DeadlineMs: start + 500, Value: value, Group: group, Receipt: "r"}
}

// clean is a history every checker must accept: plain delivery and ack, a
// redelivery after expiry with the stale ack rejected, a lease extension, a
// crashed consumer, an indeterminate enqueue that shows up, one that does
// not, a failed enqueue, a message dead-lettered after its max receives
// and a FIFO group in order; under a setup that asked for partition and
// kill, both of which fired, and a final phase that completed with every
// server record fetched and both shards' replicas converged and equal.
func clean() *builder {
	b := &builder{}
	b.phase(history.Info, history.PhaseSetup, history.Op{Setup: setup()})
	b.fault("partition", "partition halves minority [n1] majority [n2 n3]")
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
	b.fault("kill", "kill -9 n2 (node)")
	b.phase(history.Info, history.PhaseHeal, history.Op{})
	b.phase(history.Info, history.PhaseDrain, history.Op{})
	b.final("0-1", history.Record{State: history.StateAcked, Attempts: []history.Attempt{{Epoch: 1, ReceivedMs: 1000, EndedMs: 1100, Outcome: history.OutAcked}}})
	b.final("0-2", history.Record{State: history.StateAcked, LeaseEpoch: 5, LeaseDeadMs: 2300, Attempts: []history.Attempt{
		{Epoch: 2, ReceivedMs: 1000, EndedMs: 1850, Outcome: history.OutExpired},
		{Epoch: 5, ReceivedMs: 1800, EndedMs: 1900, Outcome: history.OutAcked}}})
	b.final("1-1", history.Record{State: history.StateAcked, Attempts: []history.Attempt{{Epoch: 1, ReceivedMs: 1000, EndedMs: 1050, Outcome: history.OutAcked}}})
	b.final("0-6", history.Record{State: history.StateDead, ReceiveCount: 3, DeadReason: "MAX_RECEIVES", Attempts: []history.Attempt{{Epoch: 4, ReceivedMs: 1200, EndedMs: 1700, Outcome: history.OutExpired}}})
	b.final("0-3", history.Record{State: history.StateAcked, Attempts: []history.Attempt{{Epoch: 3, ReceivedMs: 1100, EndedMs: 1150, Outcome: history.OutAcked}}})
	b.final("1-2", history.Record{State: history.StateAcked, Attempts: []history.Attempt{
		{Epoch: 2, ReceivedMs: 1100, EndedMs: 1600, Outcome: history.OutExpired},
		{Epoch: 3, ReceivedMs: 1600, EndedMs: 1650, Outcome: history.OutAcked}}})
	b.final("1-3", history.Record{State: history.StateAcked, Attempts: []history.Attempt{{Epoch: 4, ReceivedMs: 1700, EndedMs: 1750, Outcome: history.OutAcked}}})
	b.phase(history.OK, history.PhaseReplicas, history.Op{Shards: replicas()})
	b.phase(history.OK, history.PhaseFinal, history.Op{})
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
		// text, if set, must appear in a violation: the rule meant fired.
		text string
	}{
		{"lost message", func(b *builder) []history.Op {
			// v1 was acknowledged to the producer but nobody ever saw it.
			return drop(b.ops, func(op history.Op) bool {
				return op.MessageID == "0-1" && op.F != history.FEnqueue || len(op.Deliveries) > 0 && op.Deliveries[0].MessageID == "0-1"
			})
		}, "total-queue", "lost", ""},
		{"unfinished message", func(b *builder) []history.Op {
			// v1 delivered, the ack never succeeded, and the final record says
			// it is still leased.
			ops := drop(b.ops, func(op history.Op) bool {
				return op.F == history.FAck && op.MessageID == "0-1" || op.F == history.FFinal && op.MessageID == "0-1"
			})
			b.ops = ops
			b.final("0-1", history.Record{State: history.StateLeased})
			return b.ops
		}, "total-queue", "unfinished", ""},
		{"double lease", func(b *builder) []history.Op {
			// Epoch 5 granted at 1700, before epoch 2's extended deadline 1800.
			b.receive(11, "q", dl("0-2", "v2", 7, 1700, ""))
			return b.ops
		}, "lease", "double-lease", ""},
		{"double lease from server history", func(b *builder) []history.Op {
			ops := drop(b.ops, func(op history.Op) bool { return op.F == history.FFinal && op.MessageID == "0-1" })
			b.ops = ops
			b.final("0-1", history.Record{State: history.StateAcked, Attempts: []history.Attempt{
				{Epoch: 1, ReceivedMs: 1000, EndedMs: 1600, Outcome: history.OutExpired},
				{Epoch: 9, ReceivedMs: 1400, EndedMs: 1700, Outcome: history.OutAcked}}})
			return b.ops
		}, "lease", "double-lease", ""},
		{"one epoch to two clients", func(b *builder) []history.Op {
			b.receive(12, "q", dl("0-1", "v1", 1, 1000, ""))
			return b.ops
		}, "lease", "epoch-twice", ""},
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
		}, "order", "reordered", ""},
		{"two in flight in a group", func(b *builder) []history.Op {
			// c leased at 1650 while b's epoch 3 lease (1600..2100) holds.
			for i := range b.ops {
				for j := range b.ops[i].Deliveries {
					if b.ops[i].Deliveries[j].Value == "c" {
						b.ops[i].Deliveries[j].DeadlineMs = 1650 + 500
					}
				}
			}
			// b's ack never happened: the server still has epoch 3 leased.
			ops := drop(b.ops, func(op history.Op) bool { return op.F == history.FAck && op.MessageID == "1-2" })
			return mutateOps(ops, isFinal("1-2"), func(op *history.Op) {
				op.Final = &history.Record{State: history.StateLeased, LeaseEpoch: 3, LeaseDeadMs: 2100, Attempts: []history.Attempt{
					{Epoch: 2, ReceivedMs: 1100, EndedMs: 1600, Outcome: history.OutExpired}, {Epoch: 3, ReceivedMs: 1600}}}
			})
		}, "order", "two-in-flight", ""},
		{"group acks out of order", func(b *builder) []history.Op {
			// a's only successful ack comes after c's.
			ops := drop(b.ops, func(op history.Op) bool { return op.F == history.FAck && op.MessageID == "1-1" })
			b.ops = ops
			b.ack(9, "1-1", 1, history.OK)
			return b.ops
		}, "order", "ack-reordered", ""},
		{"dedup break", func(b *builder) []history.Op {
			// A retry of v1 with the same key got a second id.
			b.enqueue(1, "q", "", "v1", history.OK, "0-77")
			return b.ops
		}, "dedup", "dup-ids", ""},
		{"resurrection", func(b *builder) []history.Op {
			b.receive(13, "q", dl("0-1", "v1", 8, 5000, ""))
			return b.ops
		}, "total-queue", "resurrected", ""},
		{"stale ack accepted", func(b *builder) []history.Op {
			for i := range b.ops {
				if b.ops[i].F == history.FAck && b.ops[i].Process == 4 && b.ops[i].Type == history.Fail {
					b.ops[i].Type = history.OK
				}
			}
			return b.ops
		}, "stale-ack", "stale-accepted", ""},
		{"failed enqueue delivered", func(b *builder) []history.Op {
			b.receive(14, "q", dl("0-5", "v5", 9, 3000, ""))
			return b.ops
		}, "total-queue", "delivered-failed", ""},
		{"unexpected value", func(b *builder) []history.Op {
			b.receive(14, "q", dl("0-50", "nobody-sent-me", 9, 3000, ""))
			return b.ops
		}, "total-queue", "unexpected", ""},
		{"group member skipped", func(b *builder) []history.Op {
			// a was never leased and is not settled, yet b was leased.
			return drop(b.ops, func(op history.Op) bool {
				return op.MessageID == "1-1" && op.F != history.FEnqueue || len(op.Deliveries) > 0 && op.Deliveries[0].MessageID == "1-1"
			})
		}, "order", "skipped", ""},
		{"server history resurrects an acked message", func(b *builder) []history.Op {
			return mutateOps(b.ops, isFinal("0-1"), func(op *history.Op) {
				op.Final = &history.Record{State: history.StateLeased, Attempts: []history.Attempt{
					{Epoch: 1, ReceivedMs: 1000, EndedMs: 1100, Outcome: history.OutAcked}, {Epoch: 6, ReceivedMs: 4000}}}
			})
		}, "total-queue", "resurrected", "after an acked attempt"},
		{"a later epoch of what the server says was acked", func(b *builder) []history.Op {
			// The client never learned its ack's outcome; the server says
			// epoch 1 was acked; epoch 8 reaches a client anyway.
			ops := mutateOps(b.ops, func(op history.Op) bool {
				return op.F == history.FAck && op.MessageID == "0-1" && op.Type == history.OK
			}, func(op *history.Op) { op.Type = history.Info })
			b.ops = ops
			b.receive(15, "q", dl("0-1", "v1", 8, 5000, ""))
			return b.ops
		}, "total-queue", "resurrected", "records epoch 1 as acked"},
		{"confirmed ack, message alive at the end", func(b *builder) []history.Op {
			return mutateOps(b.ops, isFinal("0-1"), func(op *history.Op) {
				op.Final = &history.Record{State: "READY", Attempts: []history.Attempt{{Epoch: 1, ReceivedMs: 1000, EndedMs: 1500, Outcome: history.OutExpired}}}
			})
		}, "total-queue", "resurrected", "final record says READY"},
		{"acked on the server, no client ack", func(b *builder) []history.Op {
			// Every ack of v1 was refused, yet the server says ACKED.
			return mutateOps(b.ops, func(op history.Op) bool {
				return op.F == history.FAck && op.MessageID == "0-1" && op.Type == history.OK
			}, func(op *history.Op) { op.Type = history.Fail })
		}, "total-queue", "phantom-ack", ""},
		{"dead-lettered with too few receives", func(b *builder) []history.Op {
			return mutateOps(b.ops, isFinal("0-6"), func(op *history.Op) { op.Final.ReceiveCount = 1 })
		}, "total-queue", "dead-early", ""},
		{"lease shortened in real time beyond the clock bound", func(b *builder) []history.Op {
			// A 2 s lease, held without extension, re-granted 10 ms later in
			// real time: beyond 2 x 500 ms + margin.
			b.enqueue(1, "q", "", "v9", history.OK, "0-9")
			b.pair(history.Op{F: history.FReceive, Process: 16, Queue: "q", VisibilityMs: 2000},
				history.Op{Type: history.OK, Deliveries: []history.Delivery{{MessageID: "0-9", Epoch: 11, DeadlineMs: 5000, Value: "v9", Receipt: "r"}}})
			b.receive(17, "q", dl("0-9", "v9", 12, 5000, ""))
			b.ack(17, "0-9", 12, history.OK)
			b.final("0-9", history.Record{State: history.StateAcked})
			return b.ops
		}, "lease", "lease-shortened", ""},
		{"no final phase", func(b *builder) []history.Op {
			return drop(b.ops, isPhase(history.PhaseFinal))
		}, "final", "no-final-phase", ""},
		{"final phase failed", func(b *builder) []history.Op {
			return mutateOps(b.ops, isPhase(history.PhaseFinal), func(op *history.Op) {
				op.Type, op.Error = history.Fail, "cluster did not heal: n2: shard 1 has no leader"
			})
		}, "final", "final-failed", ""},
		{"missing server record", func(b *builder) []history.Op {
			return drop(b.ops, isFinal("0-3"))
		}, "final", "missing-record", ""},
		{"replicas never converged", func(b *builder) []history.Op {
			return mutateOps(b.ops, isPhase(history.PhaseReplicas), func(op *history.Op) { op.Shards[1].Applied["n3"] = 38 })
		}, "final", "not-converged", "different applied indexes"},
		{"a replica missing from the comparison", func(b *builder) []history.Op {
			return mutateOps(b.ops, isPhase(history.PhaseReplicas), func(op *history.Op) {
				op.Shards[0].Replicas = []string{"n1", "n2"}
			})
		}, "final", "not-converged", "of the run's 3"},
		{"a shard missing from the comparison", func(b *builder) []history.Op {
			return mutateOps(b.ops, isPhase(history.PhaseReplicas), func(op *history.Op) { op.Shards = op.Shards[:1] })
		}, "final", "not-converged", "1 shards of the run's 2"},
		{"replicas not compared: digest not fetched", func(b *builder) []history.Op {
			return mutateOps(b.ops, isPhase(history.PhaseReplicas), func(op *history.Op) {
				delete(op.Shards[0].Digests, "n2")
				op.Shards[0].Errors = []string{"n2: Unavailable"}
			})
		}, "final", "not-compared", "gave no FSM digest"},
		{"replicas not compared: digests at different indexes", func(b *builder) []history.Op {
			return mutateOps(b.ops, isPhase(history.PhaseReplicas), func(op *history.Op) { op.Shards[0].Digests["n2"] = "41:bb" })
		}, "final", "not-compared", "different applied indexes"},
		{"replicas not compared at all", func(b *builder) []history.Op {
			return drop(b.ops, isPhase(history.PhaseReplicas))
		}, "final", "not-compared", "no replica comparison"},
		{"replicas diverged", func(b *builder) []history.Op {
			return mutateOps(b.ops, isPhase(history.PhaseReplicas), func(op *history.Op) { op.Shards[1].Digests["n3"] = "40:bb" })
		}, "final", "diverged", ""},
		{"requested fault never fired", func(b *builder) []history.Op {
			return mutateOps(b.ops, isPhase(history.PhaseSetup), func(op *history.Op) {
				op.Setup.Nemesis = append(op.Setup.Nemesis, "pause")
			})
		}, "nemesis", "not-fired", "pause"},
		{"fault could not be applied", func(b *builder) []history.Op {
			b.add(history.Op{Type: history.Invoke, F: history.FNemesis, Process: history.NemesisProcess, Kind: "partition", Fault: "partition isolate n3 (node)"})
			b.add(history.Op{Type: history.Info, F: history.FNemesis, Process: history.NemesisProcess, Kind: "partition", Fault: "partition isolate n3 (node)",
				Error: "cut 0-2: ip netns exec jl-1-n1 iptables -w -A INPUT -s 10.99.3.4 -j DROP: exit status 4"})
			return b.ops
		}, "nemesis", "nemesis-failed", "could not be applied"},
		{"fault could not be undone", func(b *builder) []history.Op {
			return mutateOps(b.ops, func(op history.Op) bool {
				return op.F == history.FNemesis && op.Kind == "kill" && op.Type == history.Info
			}, func(op *history.Op) { op.Error = "start n2: node n2 is still running" })
		}, "nemesis", "nemesis-failed", "could not be undone"},
		{"no setup", func(b *builder) []history.Op {
			return drop(b.ops, isPhase(history.PhaseSetup))
		}, "nemesis", "no-setup", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs := check(t, tt.mutate(clean()))
			r := rs[tt.checker]
			if r.Valid || r.Count[tt.kind] == 0 {
				t.Fatalf("%s did not flag %s: %s", tt.checker, tt.kind, r.Summary())
			}
			all := strings.Join(r.Violations, "\n")
			if !strings.Contains(all, tt.kind) || !strings.Contains(all, tt.text) {
				t.Errorf("violations do not name %s (%q): %v", tt.kind, tt.text, r.Violations)
			}
		})
	}
}

// A run whose final phase failed is INVALID for that reason alone: a
// message it never got to drain is not called lost, and the records and
// replicas it never got to are not listed one by one.
func TestFailedFinalPhaseIsTheOnlyFinding(t *testing.T) {
	b := clean()
	ops := mutateOps(b.ops, isPhase(history.PhaseFinal), func(op *history.Op) {
		op.Type, op.Error = history.Fail, "heal: iptables -F: exit status 4"
	})
	// v1 was never delivered before the final phase failed.
	ops = drop(ops, func(op history.Op) bool {
		return op.MessageID == "0-1" && op.F != history.FEnqueue || len(op.Deliveries) > 0 && op.Deliveries[0].MessageID == "0-1"
	})
	rs := check(t, ops)
	if tq := rs["total-queue"]; !tq.Valid || tq.Count["unconfirmed"] != 1 {
		t.Errorf("total-queue without a completed final phase: %s %v", tq.Summary(), tq.Violations)
	}
	f := rs["final"]
	if f.Valid || len(f.Violations) != 1 || f.Count["final-failed"] != 1 {
		t.Errorf("final: %s %v", f.Summary(), f.Violations)
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
// timeout, but by no more than twice the clock bound the setup states
// (plus the margin), is noted, not flagged: the nodes' clock check allows
// that much (docs/clock.md). Beyond it, it is a violation
// (the mutation "lease shortened in real time beyond the clock bound").
func TestRealTimeEarlyExpiryWithinTheClockBoundIsANote(t *testing.T) {
	for _, tc := range []struct {
		name    string
		visMs   int64
		boundMs int64
	}{
		{"500 ms lease, default bound", 500, 0},
		{"2 s lease, 1 s bound", 2000, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &builder{}
			if tc.boundMs > 0 {
				b.phase(history.Info, history.PhaseSetup, history.Op{Setup: &history.Setup{ClockBoundMs: tc.boundMs}})
			}
			b.enqueue(1, "q", "", "v", history.OK, "0-1")
			// The holder keeps working; the next epoch arrives 3 ms later.
			b.pair(history.Op{F: history.FReceive, Process: 2, Queue: "q", VisibilityMs: tc.visMs},
				history.Op{Type: history.OK, Deliveries: []history.Delivery{{MessageID: "0-1", Epoch: 1, DeadlineMs: 1000 + tc.visMs, Value: "v", Receipt: "r"}}})
			b.receive(3, "q", dl("0-1", "v", 2, 1000+tc.visMs, ""))
			b.ack(3, "0-1", 2, history.OK)
			l := check(t, b.ops)["lease"]
			if !l.Valid {
				t.Fatalf("lease flagged an early expiry within the bound: %v", l.Violations)
			}
			if l.Count["early-expiry-realtime"] != 1 || len(l.Notes) != 1 {
				t.Errorf("early expiry not noted: %s %v", l.Summary(), l.Notes)
			}
		})
	}
}
