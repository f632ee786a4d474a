package checker

import (
	"fmt"
	"strings"
	"testing"

	"github.com/raftq/raftq/jepsen-lite/history"
)

// Subscriptions of the fan-out histories: "all" takes everything, "eu"
// filters, "dlq" dead-letters poison publishes, "late" is created while a
// publish (f4) is under way.
var (
	fanAll  = history.Subscription{Topic: "t", FIFO: true, MaxReceives: 5}
	fanEU   = history.Subscription{Topic: "t", FIFO: true, MaxReceives: 5, Filter: `attr.region ^= eu- and type != audit`}
	fanDLQ  = history.Subscription{Topic: "t", FIFO: true, MaxReceives: 2, Poison: true}
	fanLate = history.Subscription{Topic: "t", FIFO: true, MaxReceives: 5}
)

func (b *builder) subscribe(p int, name string, spec history.Subscription, typ string) {
	b.pair(history.Op{F: history.FSubscribe, Process: p, Queue: name, Sub: &spec}, history.Op{Type: typ, Sub: &spec})
}

func (b *builder) publish(p int, value, group, region, typ string, poison bool, done history.Op) {
	attrs := map[string]string{"region": region, history.PoisonAttr: "normal"}
	if poison {
		attrs[history.PoisonAttr] = history.PoisonValue
	}
	b.pair(history.Op{F: history.FPublish, Process: p, Queue: "t", Group: group, Value: value, DedupKey: "dk-" + value, MsgType: typ, Attrs: attrs}, done)
}

// consume receives one copy at shard time start and acks it.
func (b *builder) consume(p int, sub, id, value string, epoch uint64, start int64) {
	b.receive(p, sub, dl(id, value, epoch, start, "g"))
	b.ack(p, id, epoch, history.OK)
}

func (b *builder) deadLetter(p int, id string, epoch uint64, typ string) {
	b.pair(history.Op{F: history.FDeadLetter, Process: p, MessageID: id, Epoch: epoch}, history.Op{Type: typ})
}

func (b *builder) dlqEntry(queue, id, value string, rec history.Record) {
	b.add(history.Op{Type: history.OK, F: history.FDead, Process: history.NemesisProcess, Queue: queue, MessageID: id, Value: value, Final: &rec})
}

// fanClean is a fan-out history every checker must accept: group g's
// f1 (eu), f2 (us: not for "eu"; its first attempt's outcome unknown, the
// retry deduplicated), f3 (poison: dead-lettered on "dlq" by hand, acked
// everywhere else), f4 (audit: not for "eu"; published while "late" was
// being created, so "late" may or may not get it: here it does not) and
// f5 (after "late" was created: on all four). f1's copy on "all" is
// delivered twice, the first lease expiring. Copy ids: "<shard>-<n>"
// with n = 10 × publish + subscription (all 1, eu 2, dlq 3, late 4).
func fanClean() *builder {
	b := &builder{}
	b.phase(history.Info, history.PhaseSetup, history.Op{Setup: setup()})
	b.fault("partition", "partition halves minority [n1] majority [n2 n3]")
	b.subscribe(1, "t", history.Subscription{Topic: "t", FIFO: true}, history.OK)
	b.subscribe(1, "all", fanAll, history.Info) // unknown outcome, then confirmed
	b.subscribe(2, "all", fanAll, history.OK)
	b.subscribe(2, "eu", fanEU, history.OK)
	b.subscribe(2, "dlq", fanDLQ, history.OK)
	b.publish(3, "f1", "g", "eu-west", "order", false, history.Op{Type: history.OK, MessageID: "0-1", Copies: 3})
	b.publish(3, "f2", "g", "us-east", "order", false, history.Op{Type: history.Info})
	b.publish(4, "f2", "g", "us-east", "order", false, history.Op{Type: history.OK, MessageID: "0-2", Deduplicated: true})
	b.publish(4, "f3", "g", "eu-north", "order", true, history.Op{Type: history.OK, MessageID: "0-3", Copies: 3})
	// "late" is asked for; f4 is published meanwhile; "late" is confirmed.
	b.add(history.Op{Type: history.Invoke, F: history.FSubscribe, Process: 5, Queue: "late", Sub: &fanLate})
	b.publish(4, "f4", "g", "eu-west", "audit", false, history.Op{Type: history.OK, MessageID: "0-4", Copies: 3})
	b.add(history.Op{Type: history.OK, F: history.FSubscribe, Process: 5, Queue: "late", Sub: &fanLate})
	b.publish(4, "f5", "g", "eu-west", "order", false, history.Op{Type: history.OK, MessageID: "0-5", Copies: 4})

	// "all": f1 (redelivered after its first lease expired), f2, f3, f4, f5.
	b.receive(10, "all", dl("1-11", "f1", 1, 1000, "g"))
	b.consume(11, "all", "1-11", "f1", 2, 1500)
	b.consume(11, "all", "1-21", "f2", 3, 2000)
	b.consume(11, "all", "1-31", "f3", 4, 2100)
	b.consume(11, "all", "1-41", "f4", 5, 2200)
	b.consume(11, "all", "1-51", "f5", 6, 2300)
	// "eu": f1, f3, f5.
	b.consume(12, "eu", "1-12", "f1", 7, 1000)
	b.consume(12, "eu", "1-32", "f3", 8, 1100)
	b.consume(12, "eu", "1-52", "f5", 9, 1200)
	// "dlq": f1, f2, f3 dead-lettered by hand, f4, f5.
	b.consume(13, "dlq", "1-13", "f1", 10, 1000)
	b.consume(13, "dlq", "1-23", "f2", 11, 1100)
	b.receive(13, "dlq", dl("1-33", "f3", 12, 1200, "g"))
	b.deadLetter(13, "1-33", 12, history.OK)
	b.consume(13, "dlq", "1-43", "f4", 13, 1300)
	b.consume(13, "dlq", "1-53", "f5", 14, 1400)
	// "late": f5 only.
	b.consume(14, "late", "1-54", "f5", 15, 1500)

	b.fault("kill", "kill -9 n2 (node)")
	b.phase(history.Info, history.PhaseHeal, history.Op{})
	b.phase(history.Info, history.PhaseDrain, history.Op{})
	dead := history.Record{State: history.StateDead, Value: "f3", ReceiveCount: 1, DeadReason: "POISON"}
	b.dlqEntry("dlq", "1-33", "f3", dead)
	for _, id := range []string{"1-11", "1-21", "1-31", "1-41", "1-51", "1-12", "1-32", "1-52", "1-13", "1-23", "1-43", "1-53", "1-54"} {
		b.final(id, history.Record{State: history.StateAcked})
	}
	b.final("1-33", dead)
	b.phase(history.OK, history.PhaseReplicas, history.Op{Shards: replicas()})
	b.phase(history.OK, history.PhaseFinal, history.Op{})
	return b
}

func TestFanoutCleanHistoryPasses(t *testing.T) {
	rs := check(t, fanClean().ops)
	for _, r := range rs {
		if !r.Valid {
			t.Errorf("%s flagged a clean fan-out history: %v", r.Name, r.Violations)
		}
	}
	want := map[string]int{
		"subscriptions": 4,
		// f1..f5 on all and dlq, f1 f3 f5 on eu, f5 on late.
		"required":      14,
		"filtered-out":  2,
		"acked":         13,
		"dead-lettered": 1,
		"poison-dead":   1,
		"isolated":      1,
		"order-groups":  4,
		"order-checked": 14,
		"publish-ok":    5,
	}
	for k, n := range want {
		if got := rs["fanout"].Count[k]; got != n {
			t.Errorf("fanout %s = %d, want %d (counts %v)", k, got, n, rs["fanout"].Count)
		}
	}
	if rs["total-queue"].Count["unexpected"] != 0 {
		t.Errorf("total-queue judged subscription copies: %v", rs["total-queue"].Violations)
	}
}

// isCopy matches the operations about copy id: its receives, acks,
// dead-letter calls, DLQ entry and final record.
func isCopy(id string) func(history.Op) bool {
	return func(op history.Op) bool {
		if op.MessageID == id && op.F != history.FPublish {
			return true
		}
		for _, d := range op.Deliveries {
			if d.MessageID == id {
				return true
			}
		}
		return false
	}
}

// beforeFinal inserts ops made by add just before the heal phase, where
// the clients' operations end.
func beforeFinal(b *builder, add func(b *builder)) []history.Op {
	cut := 0
	for i, op := range b.ops {
		if op.F == history.FPhase && op.Fault == history.PhaseHeal {
			cut = i
		}
	}
	tail := append([]history.Op(nil), b.ops[cut:]...)
	b.ops = b.ops[:cut]
	add(b)
	b.ops = append(b.ops, tail...)
	return b.ops
}

func TestFanoutMutationsAreFlagged(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(b *builder) []history.Op
		kind   string
		text   string
	}{
		{"lost copy", func(b *builder) []history.Op {
			// f1 reached "all" and "dlq" but never "eu".
			return drop(b.ops, isCopy("1-12"))
		}, "lost", `eu: "f1"`},
		{"lost on the late subscription", func(b *builder) []history.Op {
			return drop(b.ops, isCopy("1-54"))
		}, "lost", `late: "f5"`},
		{"filter violation", func(b *builder) []history.Op {
			// f2 (region us-east) delivered to "eu".
			return beforeFinal(b, func(b *builder) {
				b.consume(12, "eu", "1-22", "f2", 20, 3000)
				b.final("1-22", history.Record{State: history.StateAcked})
			})
		}, "filter-violation", "f2"},
		{"audit type filtered", func(b *builder) []history.Op {
			return beforeFinal(b, func(b *builder) {
				b.consume(12, "eu", "1-42", "f4", 20, 3000)
				b.final("1-42", history.Record{State: history.StateAcked})
			})
		}, "filter-violation", "f4"},
		{"order violation", func(b *builder) []history.Op {
			// On "eu", f3 leased at an epoch below f1's.
			return mutateOps(b.ops, func(op history.Op) bool { return true }, func(op *history.Op) {
				for i := range op.Deliveries {
					if op.Deliveries[i].MessageID == "1-32" {
						op.Deliveries[i].Epoch = 6
					}
				}
				if op.MessageID == "1-32" && op.F == history.FAck {
					op.Epoch = 6
				}
			})
		}, "reordered", "eu/g"},
		{"group member skipped", func(b *builder) []history.Op {
			// f1 never reached "dlq" nor is settled there, yet f2 did.
			return drop(b.ops, isCopy("1-13"))
		}, "skipped", "dlq/g"},
		{"dead-lettered elsewhere too", func(b *builder) []history.Op {
			// f3, dead-lettered on "dlq", is also in "all"'s DLQ after
			// one receive and no dead-letter call: the DLQ leaked.
			ops := drop(b.ops, func(op history.Op) bool { return op.F == history.FAck && op.MessageID == "1-31" || isFinal("1-31")(op) })
			b.ops = ops
			rec := history.Record{State: history.StateDead, Value: "f3", ReceiveCount: 1, DeadReason: "POISON"}
			b.ops = beforeFinal(b, func(b *builder) {})
			b.dlqEntry("all", "1-31", "f3", rec)
			b.final("1-31", rec)
			return b.ops
		}, "dlq-isolation", "all"},
		{"left unsettled where not dead-lettered", func(b *builder) []history.Op {
			ops := drop(b.ops, func(op history.Op) bool { return op.F == history.FAck && op.MessageID == "1-32" })
			return mutateOps(ops, isFinal("1-32"), func(op *history.Op) { op.Final = &history.Record{State: history.StateLeased} })
		}, "dlq-isolation", "eu"},
		{"delivered before creation", func(b *builder) []history.Op {
			// f1 was done before "late" was asked for.
			return beforeFinal(b, func(b *builder) {
				b.consume(14, "late", "1-14", "f1", 30, 5000)
				b.final("1-14", history.Record{State: history.StateAcked})
			})
		}, "before-creation", "f1"},
		{"two copies on one subscription", func(b *builder) []history.Op {
			return beforeFinal(b, func(b *builder) {
				b.consume(11, "all", "2-51", "f5", 30, 5000)
				b.final("2-51", history.Record{State: history.StateAcked})
			})
		}, "dup-copies", "f5"},
		{"copy count", func(b *builder) []history.Op {
			return mutateOps(b.ops, func(op history.Op) bool { return op.F == history.FPublish && op.MessageID == "0-1" },
				func(op *history.Op) { op.Copies = 2 })
		}, "copies", "f1"},
		{"deduplicated publish with copies", func(b *builder) []history.Op {
			return mutateOps(b.ops, func(op history.Op) bool { return op.F == history.FPublish && op.Deduplicated },
				func(op *history.Op) { op.Copies = 3 })
		}, "copies", "deduplicated"},
		{"unexpected copy", func(b *builder) []history.Op {
			return beforeFinal(b, func(b *builder) {
				b.consume(11, "all", "1-99", "nobody-published-me", 30, 5000)
				b.final("1-99", history.Record{State: history.StateAcked})
			})
		}, "unexpected", "nobody"},
		{"failed publish delivered", func(b *builder) []history.Op {
			return beforeFinal(b, func(b *builder) {
				b.publish(4, "f6", "h", "eu-west", "order", false, history.Op{Type: history.Fail})
				b.consume(11, "all", "1-61", "f6", 30, 5000)
				b.final("1-61", history.Record{State: history.StateAcked})
			})
		}, "delivered-failed", "f6"},
		{"dead-lettered without cause", func(b *builder) []history.Op {
			// f5 (not poison) in "dlq"'s DLQ after one receive.
			ops := drop(b.ops, func(op history.Op) bool { return op.F == history.FAck && op.MessageID == "1-53" || isFinal("1-53")(op) })
			b.ops = ops
			rec := history.Record{State: history.StateDead, Value: "f5", ReceiveCount: 1, DeadReason: "MAX_RECEIVES"}
			b.dlqEntry("dlq", "1-53", "f5", rec)
			b.final("1-53", rec)
			return b.ops
		}, "dead-early", "f5"},
		{"poison never dead-lettered", func(b *builder) []history.Op {
			ops := drop(b.ops, func(op history.Op) bool {
				return op.F == history.FDeadLetter || op.F == history.FDead || isFinal("1-33")(op)
			})
			b.ops = ops
			b.final("1-33", history.Record{State: history.StateAcked})
			b.ops = beforeFinal(b, func(b *builder) { b.ack(13, "1-33", 12, history.OK) })
			return b.ops
		}, "no-dead-letter", "dlq"},
		{"dead-lettered, yet not dead", func(b *builder) []history.Op {
			ops := drop(b.ops, func(op history.Op) bool { return op.F == history.FDead })
			return mutateOps(ops, isFinal("1-33"), func(op *history.Op) { op.Final = &history.Record{State: history.StateLeased} })
		}, "dead-missing", "1-33"},
		{"DLQ body freed", func(b *builder) []history.Op {
			return mutateOps(b.ops, func(op history.Op) bool { return op.F == history.FDead }, func(op *history.Op) { op.Value = "" })
		}, "dead-body", "1-33"},
		{"unfinished copy", func(b *builder) []history.Op {
			ops := drop(b.ops, func(op history.Op) bool { return op.F == history.FAck && op.MessageID == "1-12" })
			return mutateOps(ops, isFinal("1-12"), func(op *history.Op) { op.Final = &history.Record{State: history.StateLeased} })
		}, "unfinished", "f1"},
		{"phantom ack", func(b *builder) []history.Op {
			return drop(b.ops, func(op history.Op) bool { return op.F == history.FAck && op.MessageID == "1-12" })
		}, "phantom-ack", "1-12"},
		{"dedup key, two publications", func(b *builder) []history.Op {
			// A later retry of f2 answered another publication id.
			return beforeFinal(b, func(b *builder) {
				b.publish(4, "f2", "g", "us-east", "order", false, history.Op{Type: history.OK, MessageID: "0-77", Deduplicated: true})
			})
		}, "dup-ids", "dk-f2"},
		{"subscription never created", func(b *builder) []history.Op {
			return mutateOps(b.ops, func(op history.Op) bool {
				return op.F == history.FSubscribe && op.Queue == "late" && op.Type == history.OK
			}, func(op *history.Op) { op.Type = history.Fail })
		}, "subscribe-failed", "late"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ops := tc.mutate(fanClean())
			r := check(t, ops)["fanout"]
			if r.Valid || r.Count[tc.kind] == 0 {
				t.Fatalf("fanout did not flag %s: valid=%v counts=%v violations=%v", tc.kind, r.Valid, r.Count, r.Violations)
			}
			found := false
			for _, v := range r.Violations {
				found = found || strings.HasPrefix(v, tc.kind+":") && strings.Contains(v, tc.text)
			}
			if !found {
				t.Errorf("no %s violation mentions %q: %v", tc.kind, tc.text, r.Violations)
			}
		})
	}
}

// A publish whose outcome is unknown and that reached no subscription
// is no loss; without a completed final phase, nothing is lost either.
func TestFanoutUnknownIsNotLost(t *testing.T) {
	b := fanClean()
	ops := beforeFinal(b, func(b *builder) {
		b.publish(4, "f7", "g", "eu-west", "order", false, history.Op{Type: history.Info})
	})
	if r := check(t, ops)["fanout"]; !r.Valid {
		t.Errorf("an unknown publish that reached nobody was flagged: %v", r.Violations)
	}
	// An unknown publish that reached one subscription took effect: it is
	// due on the others, and its absence there is a broken publish.
	ops = beforeFinal(fanClean(), func(b *builder) {
		b.publish(4, "f8", "g", "eu-west", "order", false, history.Op{Type: history.Info})
		b.consume(11, "all", "1-81", "f8", 30, 3000)
		b.final("1-81", history.Record{State: history.StateAcked})
	})
	if r := check(t, ops)["fanout"]; r.Valid || !strings.Contains(fmt.Sprint(r.Violations), `"f8"`) {
		t.Errorf("an unknown publish delivered on one subscription only passed: valid=%v %v", r.Valid, r.Violations)
	}
	ops = drop(fanClean().ops, isCopy("1-12"))
	ops = mutateOps(ops, isPhase(history.PhaseFinal), func(op *history.Op) { op.Type, op.Error = history.Fail, "drain did not end" })
	r := check(t, ops)["fanout"]
	if !r.Valid || r.Count["unconfirmed"] != 1 {
		t.Errorf("without a final phase, a missing copy must be unconfirmed, not lost: valid=%v counts=%v %v", r.Valid, r.Count, r.Violations)
	}
}

func TestFilterLanguage(t *testing.T) {
	m := msgFields{typ: "order.placed", group: "g1", attrs: map[string]string{"region": "eu-west", "prio": "high", "q": `a "b"`}}
	cases := []struct {
		expr string
		want bool
	}{
		{"", true},
		{"type = order.placed", true},
		{"type=order.placed and attr.region ^= eu-", true},
		{"attr.region ^= us-", false},
		{"attr.missing != x", true},
		{"attr.missing = x", false},
		{"exists(attr.prio) and not exists(attr.nope)", true},
		{"not exists(attr.prio)", false},
		{"group = g1 and group != g2", true},
		{`attr.q = "a \"b\""`, true},
		{`attr.region = "and"`, false},
		{"type != order.placed", false},
	}
	for _, c := range cases {
		f, err := compileFilter(c.expr)
		if err != nil {
			t.Errorf("%q: %v", c.expr, err)
			continue
		}
		if got := f.match(m); got != c.want {
			t.Errorf("%q matched %v, want %v", c.expr, got, c.want)
		}
	}
	if got := (compiledFilter(nil)).match(msgFields{}); !got {
		t.Error("an empty filter must match an empty message")
	}
	for _, bad := range []string{"region = x", "attr.x", "attr.x = y or attr.y = z", "exists(attr.x", `attr.x = "open`, "attr. = x"} {
		if _, err := compileFilter(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
