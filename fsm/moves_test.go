package fsm

import (
	"maps"
	"testing"

	"github.com/raftq/raftq/fsm/fsmpb"
)

// movesHarness records every move Options.Moves reports, summed by
// "queue/event".
func movesHarness(t *testing.T) (*harness, map[string]uint64) {
	h := newHarness(t)
	got := map[string]uint64{}
	h.f = New(Options{Moves: func(ms []MoveCount) {
		for _, m := range ms {
			if m.N == 0 {
				t.Errorf("move %+v reported with N 0", m)
			}
			got[m.Queue+"/"+m.Event] += m.N
		}
	}})
	return h, got
}

// Each way a message moves is reported once, under its queue and the
// event name the metrics use.
func TestMovesReportEveryTransition(t *testing.T) {
	h, got := movesHarness(t)
	h.mustQueue("q", &fsmpb.QueuePolicy{MaxReceiveCount: 2, RetentionMs: 60_000, DeadRetentionMs: 120_000})
	h.mustQueue("r", &fsmpb.QueuePolicy{})
	want := map[string]uint64{}
	check := func(step string) {
		t.Helper()
		if !maps.Equal(got, want) {
			t.Fatalf("after %s: moves %v, want %v", step, got, want)
		}
	}

	h.mustEnqueue("q", body("a"))
	want["q/sent"] = 1
	check("send")
	ms := h.mustReceive("q", 1, 1000)
	want["q/received"] = 1
	check("receive")
	h.mustOK(nackCmd(nackDelay(receipt(ms[0]), 0, "boom")))
	want["q/nacked"] = 1
	check("nack")

	ms = h.mustReceive("q", 1, 1000)
	h.mustOK(snoozeCmd(snoozeItem(receipt(ms[0]), 0, "later")))
	want["q/received"] = 2
	want["q/snoozed"] = 1
	check("snooze")

	ms = h.mustReceive("q", 1, 1000)
	h.mustOK(extendCmd(receipt(ms[0]), 1000))
	want["q/received"] = 3
	want["q/extended"] = 1
	check("extend")
	// The lease ends, and with it the last allowed receive: one lease
	// expiry and one automatic dead letter.
	h.now += 2000
	h.mustOK(tickCmd())
	want["q/lease_expired"] = 1
	want["q/dead_lettered"] = 1
	check("lease expiry on the last receive")

	h.mustOK(redriveCmd("q", 0))
	want["q/redriven"] = 1
	check("redrive")

	ms = h.mustReceive("q", 1, 1000)
	h.mustOK(deadLetterCmd(receipt(ms[0]), "poison"))
	want["q/received"] = 4
	want["q/dead_lettered_by_client"] = 1
	check("dead-letter by the client")

	h.mustEnqueue("r", body("b"))
	ms = h.mustReceive("r", 1, 1000)
	h.mustOK(ackCmd(receipt(ms[0])))
	// A repeated ack changes nothing and is not a move.
	h.mustOK(ackCmd(receipt(ms[0])))
	want["r/sent"] = 1
	want["r/received"] = 1
	want["r/acked"] = 1
	check("ack")

	h.mustEnqueue("q", body("c"))
	h.now += 61_000 // past retention_ms
	h.mustOK(tickCmd())
	want["q/sent"] = 2
	want["q/expired"] = 1
	check("retention")

	h.now += 121_000 // both dead messages past dead_retention_ms
	h.mustOK(tickCmd())
	want["q/dead_expired"] = 2
	check("dead retention")
}

// A send counts the messages it enqueued: a retry with a live dedup key
// enqueues nothing and is not a send, nor is an item the queue refused. A
// receive counts each lease it granted, none when nothing was ready.
func TestMovesCountSendsAndLeases(t *testing.T) {
	h, got := movesHarness(t)
	h.mustQueue("q", &fsmpb.QueuePolicy{MaxMessagesPerShard: 3})
	want := map[string]uint64{}
	check := func(step string) {
		t.Helper()
		if !maps.Equal(got, want) {
			t.Fatalf("after %s: moves %v, want %v", step, got, want)
		}
	}

	h.mustEnqueue("q", keyed("k1", "a"), keyed("k2", "b"))
	want["q/sent"] = 2
	check("two keyed sends")

	res := h.mustOK(enqueueCmd("q", keyed("k1", "a"), keyed("k2", "b")))
	for i, it := range res.GetEnqueue().GetItems() {
		if !it.GetDeduplicated() {
			t.Fatalf("resend item %d: %+v, want deduplicated", i, it)
		}
	}
	check("the same keys again")

	// One slot left: the first item goes in, the second is refused.
	items := h.mustOK(enqueueCmd("q", body("c"), body("d"))).GetEnqueue().GetItems()
	if len(items) != 2 || items[0].GetStatus().GetCode() != fsmpb.Code_CODE_OK ||
		items[1].GetStatus().GetCode() != fsmpb.Code_CODE_RESOURCE_EXHAUSTED {
		t.Fatalf("enqueue into a nearly full queue: items %v", items)
	}
	want["q/sent"] = 3
	check("a send past max_messages_per_shard")

	if ms := h.mustReceive("q", 10, 1000); len(ms) != 3 {
		t.Fatalf("received %d messages, want 3", len(ms))
	}
	want["q/received"] = 3
	check("one receive of three")

	if ms := h.mustReceive("q", 10, 1000); len(ms) != 0 {
		t.Fatalf("received %d messages from an empty queue", len(ms))
	}
	check("an empty receive")
}

// Moves are only reported: every replica applying the same log reaches
// the same state whether it reports them or not.
func TestMovesDoNotChangeState(t *testing.T) {
	h, _ := movesHarness(t)
	plain := newHarness(t)
	for _, x := range []*harness{h, plain} {
		x.mustQueue("q", &fsmpb.QueuePolicy{MaxReceiveCount: 1})
		x.mustEnqueue("q", body("a"), body("b"), keyed("k", "c"))
		x.mustEnqueue("q", keyed("k", "c"))
		ms := x.mustReceive("q", 2, 1000)
		x.mustOK(nackCmd(nackDelay(receipt(ms[0]), 0, "x")))
		x.now += 5000
		x.mustOK(tickCmd())
	}
	if a, b := stateDigest(t, h.f), stateDigest(t, plain.f); a != b {
		t.Fatalf("digest with Moves %x, without %x", a, b)
	}
}
