package checker

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/jepsen-lite/history"
)

// qStart is the harness's wall clock (Unix ms) when the hand-made quota
// histories begin: deliveries' deadlines are on that clock plus the op's
// time.
const qStart = 1_700_000_000_000

// qVis is the lease the quota histories' receives ask for: long enough
// that 2 × the clock bound + the margin (1.25 s) leaves some of it.
const qVis = 5000

// quotaBuilder starts a history of tenant "t" (queue "t/q") with
// max_messages n and max_in_flight m on the given shard count.
func quotaBuilder(shards int, n, m uint64) *builder {
	b := &builder{}
	b.phase(history.Info, history.PhaseSetup, history.Op{Setup: &history.Setup{Shards: shards, Replication: 3, ClockBoundMs: 500, StartUnixMs: qStart,
		Queues:  []history.QueueSetup{{Name: "t/q", VisibilityMs: qVis, MaxReceives: 100}},
		Tenants: []history.TenantSetup{{Name: "t", MaxMessages: n, MaxInFlight: m}}}})
	return b
}

// send records an enqueue of a value named after id that ended typ
// (ok: it returned id).
func (b *builder) send(p int, id, typ string) {
	done := history.Op{Type: typ}
	if typ == history.OK {
		done.MessageID = id
	}
	b.pair(history.Op{F: history.FEnqueue, Process: p, Queue: "t/q", Value: "v" + id, DedupKey: "k" + id}, done)
}

// refuse records an enqueue refused past a quota with a retry time of
// retryMs (0: none).
func (b *builder) refuse(p int, value string, retryMs int64) {
	b.pair(history.Op{F: history.FEnqueue, Process: p, Queue: "t/q", Value: value, DedupKey: "k" + value},
		history.Op{Type: history.Fail, Code: codeExhausted, Note: history.NoteQuota, RetryAfterMs: retryMs, Error: "tenant \"t\" is at its quota"})
}

// lease records a receive that ended typ; when ok it leased ids for qVis
// from the completion, on a shard clock that agrees with the harness's.
func (b *builder) lease(p int, typ string, ids ...string) {
	done := history.Op{Type: typ}
	if typ == history.OK {
		for _, id := range ids {
			done.Deliveries = append(done.Deliveries, history.Delivery{MessageID: id, Epoch: 1, Receipt: "r" + id, Value: "v" + id,
				DeadlineMs: qStart + (b.t+2_000_000)/1_000_000 + qVis})
		}
	}
	b.pair(history.Op{F: history.FReceive, Process: p, Queue: "t/q", VisibilityMs: qVis}, done)
}

// settle records an ack (or nack) of id that ended typ.
func (b *builder) settle(f string, p int, id, typ string) {
	b.pair(history.Op{F: f, Process: p, MessageID: id, Epoch: 1, Receipt: "r" + id}, history.Op{Type: typ})
}

func (b *builder) wait(d time.Duration) { b.t += int64(d) }

// quotaResult runs the quota checker alone.
func quotaResult(b *builder) *Result { return quotaCheck(build(b.ops)) }

type quotaCase struct {
	name  string
	build func(b *builder)
	// want is the violation kind expected, "" for a valid history.
	want string
}

func runQuotaCases(t *testing.T, shards int, n, m uint64, cases []quotaCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := quotaBuilder(shards, n, m)
			tc.build(b)
			r := quotaResult(b)
			if tc.want == "" {
				if !r.Valid {
					t.Fatalf("flagged: %v", r.Violations)
				}
				return
			}
			if r.Valid || r.Count[tc.want] == 0 {
				t.Fatalf("want %s, got valid=%v counts %v violations %v", tc.want, r.Valid, r.Count, r.Violations)
			}
		})
	}
}

// max_messages 3 on one shard: exact.
func TestQuotaDepth(t *testing.T) {
	runQuotaCases(t, 1, 3, 0, []quotaCase{
		{"within the quota", func(b *builder) {
			b.send(1, "0-1", history.OK)
			b.send(1, "0-2", history.OK)
			b.send(1, "0-3", history.OK)
			b.refuse(1, "v0-4", 1000)
			b.lease(2, history.OK, "0-1")
			b.settle(history.FAck, 2, "0-1", history.OK)
			b.send(1, "0-4", history.OK)
		}, ""},
		{"a fourth message certainly live", func(b *builder) {
			b.send(1, "0-1", history.OK)
			b.send(1, "0-2", history.OK)
			b.send(1, "0-3", history.OK)
			b.send(1, "0-4", history.OK)
		}, "over-depth"},
		// A failed ack certainly removed nothing.
		{"a failed ack frees nothing", func(b *builder) {
			b.send(1, "0-1", history.OK)
			b.send(1, "0-2", history.OK)
			b.send(1, "0-3", history.OK)
			b.lease(2, history.OK, "0-1")
			b.settle(history.FAck, 2, "0-1", history.Fail)
			b.send(1, "0-4", history.OK)
		}, "over-depth"},
		// The fourth send's outcome is unknown: it may not have applied.
		{"only if an unknown send applied", func(b *builder) {
			b.send(1, "0-1", history.OK)
			b.send(1, "0-2", history.OK)
			b.send(1, "0-3", history.OK)
			b.send(1, "0-4", history.Info)
		}, ""},
		// The ack's outcome is unknown: it may have applied, from its
		// invoke on.
		{"only if an unknown ack did not apply", func(b *builder) {
			b.send(1, "0-1", history.OK)
			b.send(1, "0-2", history.OK)
			b.send(1, "0-3", history.OK)
			b.lease(2, history.OK, "0-1")
			b.settle(history.FAck, 2, "0-1", history.Info)
			b.send(3, "0-4", history.OK)
		}, ""},
		// An ack still in flight when the fourth send completes may have
		// applied before it.
		{"an ack invoked but not yet answered", func(b *builder) {
			b.send(1, "0-1", history.OK)
			b.send(1, "0-2", history.OK)
			b.send(1, "0-3", history.OK)
			b.lease(2, history.OK, "0-1")
			b.add(history.Op{Type: history.Invoke, F: history.FAck, Process: 2, MessageID: "0-1", Epoch: 1})
			b.send(1, "0-4", history.OK)
			b.add(history.Op{Type: history.OK, F: history.FAck, Process: 2, MessageID: "0-1", Epoch: 1})
		}, ""},
		// A send whose answer was lost but whose message was delivered
		// certainly applied.
		{"an unknown send proved by a delivery", func(b *builder) {
			b.send(1, "0-1", history.OK)
			b.send(1, "0-2", history.OK)
			b.send(1, "0-3", history.OK)
			b.send(4, "0-4", history.Info)
			b.lease(2, history.OK, "0-4")
		}, "over-depth"},
		// A dead-lettered message left the live count at a moment the
		// history does not say: it is not counted.
		{"a dead-lettered message is left out", func(b *builder) {
			b.send(1, "0-1", history.OK)
			b.send(1, "0-2", history.OK)
			b.send(1, "0-3", history.OK)
			b.send(1, "0-4", history.OK)
			b.final("0-4", history.Record{State: history.StateDead, ReceiveCount: 100})
		}, ""},
		// A retried send that its dedup key answered with the same id is
		// one message.
		{"a deduplicated retry is the same message", func(b *builder) {
			b.send(1, "0-1", history.OK)
			b.send(1, "0-2", history.OK)
			b.send(1, "0-3", history.OK)
			b.send(1, "0-3", history.OK)
		}, ""},
	})
}

// max_in_flight 2 on one shard, leases of 5 s: held from the receive's
// completion until an ack or nack is sent, or until 1.25 s before the
// lease runs out in real time.
func TestQuotaInFlight(t *testing.T) {
	sendAll := func(b *builder) {
		for i := 1; i <= 6; i++ {
			b.send(1, fmt.Sprintf("0-%d", i), history.OK)
		}
	}
	runQuotaCases(t, 1, 0, 2, []quotaCase{
		{"within the quota", func(b *builder) {
			sendAll(b)
			b.lease(2, history.OK, "0-1", "0-2")
			b.lease(3, history.Fail) // refused: nothing leased
			b.settle(history.FAck, 2, "0-1", history.OK)
			b.lease(3, history.OK, "0-3")
			b.settle(history.FNack, 2, "0-2", history.OK)
			b.lease(4, history.OK, "0-4")
		}, ""},
		{"a third lease certainly held", func(b *builder) {
			sendAll(b)
			b.lease(2, history.OK, "0-1", "0-2")
			b.lease(3, history.OK, "0-3")
		}, "over-in-flight"},
		{"a failed ack ends no lease", func(b *builder) {
			sendAll(b)
			b.lease(2, history.OK, "0-1", "0-2")
			b.settle(history.FAck, 2, "0-1", history.Fail)
			b.lease(3, history.OK, "0-3")
		}, "over-in-flight"},
		// The third receive's outcome is unknown: it may have leased
		// nothing.
		{"only if an unknown receive leased", func(b *builder) {
			sendAll(b)
			b.lease(2, history.OK, "0-1", "0-2")
			b.lease(3, history.Info)
		}, ""},
		// The ack's outcome is unknown: it may have ended the lease.
		{"only if an unknown ack did not apply", func(b *builder) {
			sendAll(b)
			b.lease(2, history.OK, "0-1", "0-2")
			b.settle(history.FAck, 2, "0-1", history.Info)
			b.lease(3, history.OK, "0-3")
		}, ""},
		// The first leases may have run out 1.25 s before their 5 s in
		// real time (the clock bound): not counted past 3.75 s.
		{"leases that may have expired", func(b *builder) {
			sendAll(b)
			b.lease(2, history.OK, "0-1", "0-2")
			b.wait(3800 * time.Millisecond)
			b.lease(3, history.OK, "0-3", "0-4")
		}, ""},
		{"leases that cannot have expired yet", func(b *builder) {
			sendAll(b)
			b.lease(2, history.OK, "0-1", "0-2")
			b.wait(3600 * time.Millisecond)
			b.lease(3, history.OK, "0-3")
		}, "over-in-flight"},
		// The shard clock says the lease ends 0.8 s after the grant (a
		// leader whose clock runs ahead, within the bound): counted only
		// until 0.75 s before that deadline.
		{"a deadline earlier than the visibility", func(b *builder) {
			sendAll(b)
			b.lease(2, history.OK, "0-1")
			b.lease(4, history.OK, "0-2")
			for i := range b.ops {
				if ds := b.ops[i].Deliveries; len(ds) == 1 && ds[0].MessageID == "0-1" {
					ds[0].DeadlineMs = qStart + b.ops[i].Time/1_000_000 + 800
				}
			}
			b.wait(100 * time.Millisecond)
			b.lease(3, history.OK, "0-3")
		}, ""},
	})
}

// Every RESOURCE_EXHAUSTED answer must say when to retry.
func TestQuotaRefusalsCarryARetryTime(t *testing.T) {
	runQuotaCases(t, 1, 3, 2, []quotaCase{
		{"with a retry time", func(b *builder) { b.refuse(1, "x", 1000) }, ""},
		{"without", func(b *builder) { b.refuse(1, "x", 0) }, "no-retry-time"},
		{"a receive without", func(b *builder) {
			b.pair(history.Op{F: history.FReceive, Process: 2, Queue: "t/q", VisibilityMs: qVis},
				history.Op{Type: history.Fail, Code: codeExhausted, Note: history.NoteQuota})
		}, "no-retry-time"},
	})
	b := quotaBuilder(1, 3, 2)
	b.refuse(1, "x", 1000)
	b.refuse(1, "y", 200)
	if r := quotaResult(b); r.Count["refused-enqueue-quota"] != 2 {
		t.Fatalf("counts %v, want refused-enqueue-quota=2", r.Count)
	}
}

// On 2 shards each holds at most its share, 2 of max_messages 4; a growth
// of the shard count lets the cluster hold more in all (each shard keeps
// what it took under its larger share), never more on one shard.
func TestQuotaShares(t *testing.T) {
	four := func(b *builder) {
		b.send(1, "0-1", history.OK)
		b.send(1, "0-2", history.OK)
		b.send(1, "1-1", history.OK)
		b.send(1, "1-2", history.OK)
	}
	runQuotaCases(t, 2, 4, 0, []quotaCase{
		{"both shards at their share", four, ""},
		{"one shard past its share", func(b *builder) {
			b.send(1, "0-1", history.OK)
			b.send(1, "0-2", history.OK)
			b.send(1, "0-3", history.OK)
		}, "over-depth-shard"},
		{"a fifth message, no growth", func(b *builder) {
			four(b)
			b.send(1, "2-1", history.OK)
		}, "over-depth"},
		{"a fifth message on a shard grown meanwhile", func(b *builder) {
			four(b)
			b.fault("reshard", "reshard grow 2 -> 3 shards")
			b.send(1, "2-1", history.OK)
		}, ""},
		{"a growth does not raise a shard's share", func(b *builder) {
			four(b)
			b.fault("reshard", "reshard grow 2 -> 3 shards")
			b.send(1, "1-3", history.OK)
		}, "over-depth-shard"},
	})
}

// The summary carries the bounds and the peaks.
func TestQuotaCounts(t *testing.T) {
	b := quotaBuilder(2, 60, 12)
	b.send(1, "0-1", history.OK)
	b.lease(2, history.OK, "0-1")
	r := quotaResult(b)
	for k, want := range map[string]int{"depth-bound": 60, "max-depth": 1, "in-flight-bound": 12, "max-in-flight": 1} {
		if r.Count[k] != want {
			t.Errorf("%s = %d, want %d (%v)", k, r.Count[k], want, r.Count)
		}
	}
	// Nothing was refused: the quotas were never put to the test.
	if len(r.Notes) != 2 || !strings.Contains(r.Notes[0], "never put to the test") {
		t.Errorf("notes %q", r.Notes)
	}
}

// A quota the start's shard count does not divide is bounded by the
// shares rounded up, and a growth leaves only the per-shard bound tight:
// the notes say so.
func TestQuotaRoundingAndGrowthNotes(t *testing.T) {
	b := quotaBuilder(5, 60, 12)
	b.fault("reshard", "reshard grow 5 -> 6 shards")
	r := quotaResult(b)
	if r.Count["depth-bound"] != 60 || r.Count["in-flight-bound"] != 15 {
		t.Fatalf("counts %v, want depth-bound=60 in-flight-bound=15", r.Count)
	}
	notes := strings.Join(r.Notes, "\n")
	for _, want := range []string{"max_in_flight 12 over 5 shards is a share of 3 each, 15 in all", "the shard count grew (1 reshard faults)"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
	if strings.Contains(notes, "max_messages 60 over") {
		t.Errorf("max_messages 60 divides over 5 shards, yet a note says otherwise:\n%s", notes)
	}
}

// The peaks are reported apart before and after the first growth: only
// the first is held to the quota in all.
func TestQuotaPeaksAroundAGrowth(t *testing.T) {
	b := quotaBuilder(2, 4, 0)
	b.send(1, "0-1", history.OK)
	b.send(1, "1-1", history.OK)
	b.send(1, "1-2", history.OK)
	b.fault("reshard", "reshard grow 2 -> 3 shards")
	b.send(1, "0-2", history.OK)
	b.send(1, "2-1", history.OK)
	r := quotaResult(b)
	if !r.Valid || r.Count["max-depth"] != 3 || r.Count["max-depth-grown"] != 5 {
		t.Fatalf("valid %v counts %v, want max-depth=3 max-depth-grown=5 (%v)", r.Valid, r.Count, r.Violations)
	}
}
