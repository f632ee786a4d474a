package fsm

import (
	"strings"
	"testing"

	"github.com/raftq/raftq/fsm/fsmpb"
)

// leaseCase prepares a shard with one message in queue "q" (completed
// retention 5 s, visibility 1 s) and returns the receipt under test.
type leaseCase struct {
	name  string
	setup func(h *harness) *fsmpb.Receipt
	// What an ack of the receipt answers.
	ack          fsmpb.Code
	alreadyAcked bool
	says         string // the answer's message contains this
	// What a nack, extend and dead-letter answer (say the same thing).
	other     fsmpb.Code
	otherSays string
}

func leaseOne(h *harness) *fsmpb.Receipt {
	h.t.Helper()
	ms := h.mustReceive("q", 1, 1000)
	if len(ms) != 1 {
		h.t.Fatalf("received %d messages, want 1", len(ms))
	}
	return receipt(ms[0])
}

func leaseCases() []leaseCase {
	return []leaseCase{
		{
			name:  "live lease",
			setup: leaseOne,
			ack:   fsmpb.Code_CODE_OK, other: fsmpb.Code_CODE_OK,
		},
		{
			name: "acked with this lease",
			setup: func(h *harness) *fsmpb.Receipt {
				r := leaseOne(h)
				h.mustOK(ackCmd(r))
				return r
			},
			ack: fsmpb.Code_CODE_OK, alreadyAcked: true,
			other: fsmpb.Code_CODE_STALE_RECEIPT, otherSays: "was already acked: the message is done",
		},
		{
			name: "acked with a later lease",
			setup: func(h *harness) *fsmpb.Receipt {
				r := leaseOne(h)
				h.now += 1000 // the lease expires
				h.mustOK(ackCmd(leaseOne(h)))
				return r
			},
			ack: fsmpb.Code_CODE_STALE_RECEIPT, says: "expired and the message was already acked by another receipt",
			other: fsmpb.Code_CODE_STALE_RECEIPT, otherSays: "already acked by another receipt",
		},
		{
			name: "expired and redelivered",
			setup: func(h *harness) *fsmpb.Receipt {
				r := leaseOne(h)
				h.now += 1000
				leaseOne(h)
				return r
			},
			ack: fsmpb.Code_CODE_STALE_RECEIPT, says: "expired and the message was delivered again",
			other: fsmpb.Code_CODE_STALE_RECEIPT, otherSays: "expired and the message was delivered again",
		},
		{
			name: "expired, not delivered yet",
			setup: func(h *harness) *fsmpb.Receipt {
				r := leaseOne(h)
				h.now += 1000
				h.one(tickCmd())
				return r
			},
			ack: fsmpb.Code_CODE_STALE_RECEIPT, says: "expired; the message will be delivered again",
			other: fsmpb.Code_CODE_STALE_RECEIPT, otherSays: "expired; the message will be delivered again",
		},
		{
			name: "nacked",
			setup: func(h *harness) *fsmpb.Receipt {
				r := leaseOne(h)
				h.mustOK(nackCmd(nackDelay(r, 60_000, "boom")))
				return r
			},
			ack: fsmpb.Code_CODE_STALE_RECEIPT, says: "was nacked; the message will be delivered again",
			other: fsmpb.Code_CODE_STALE_RECEIPT, otherSays: "was nacked",
		},
		{
			name: "nacked and redelivered",
			setup: func(h *harness) *fsmpb.Receipt {
				r := leaseOne(h)
				h.mustOK(nackCmd(nackDelay(r, 0, "boom")))
				leaseOne(h)
				return r
			},
			ack: fsmpb.Code_CODE_STALE_RECEIPT, says: "was nacked and the message was delivered again",
			other: fsmpb.Code_CODE_STALE_RECEIPT, otherSays: "was nacked and the message was delivered again",
		},
		{
			name: "dead-lettered",
			setup: func(h *harness) *fsmpb.Receipt {
				r := leaseOne(h)
				h.mustOK(deadLetterCmd(r, "poison"))
				return r
			},
			ack: fsmpb.Code_CODE_STALE_RECEIPT, says: "was dead-lettered and the message is in the dead-letter queue",
			other: fsmpb.Code_CODE_STALE_RECEIPT, otherSays: "dead-letter queue",
		},
		{
			name: "acked record past its retention",
			setup: func(h *harness) *fsmpb.Receipt {
				r := leaseOne(h)
				h.mustOK(ackCmd(r))
				h.now += 5000
				h.one(tickCmd())
				if _, ok := h.f.Message(r.GetMessageId()); ok {
					h.t.Fatal("the acked record outlived its retention")
				}
				return r
			},
			ack: fsmpb.Code_CODE_MESSAGE_NOT_FOUND, says: "cannot be confirmed",
			other: fsmpb.Code_CODE_MESSAGE_NOT_FOUND, otherSays: "cannot be confirmed",
		},
		{
			name:  "message never existed",
			setup: func(h *harness) *fsmpb.Receipt { return &fsmpb.Receipt{MessageId: 99, LeaseEpoch: 1} },
			ack:   fsmpb.Code_CODE_MESSAGE_NOT_FOUND, says: "no such message",
			other: fsmpb.Code_CODE_MESSAGE_NOT_FOUND, otherSays: "no such message",
		},
		{
			name: "epoch never granted to the message",
			setup: func(h *harness) *fsmpb.Receipt {
				r := leaseOne(h)
				h.mustOK(ackCmd(r))
				r.LeaseEpoch++
				return r
			},
			ack: fsmpb.Code_CODE_STALE_RECEIPT, says: "is not a lease of this message",
			other: fsmpb.Code_CODE_STALE_RECEIPT, otherSays: "is not a lease of this message",
		},
	}
}

func newLeaseHarness(t *testing.T) *harness {
	h := newHarness(t)
	h.mustQueue("q", &fsmpb.QueuePolicy{CompletedRetentionMs: 5000, VisibilityTimeoutMs: 1000, MaxReceiveCount: 10})
	h.mustEnqueue("q", body("a"))
	return h
}

// An ack answers from the message's replicated record: success for a live
// lease, success marked already_acked for a repeat of the ack that settled
// it, and for anything else a refusal that says what became of the lease.
// A refusal or a repeat changes nothing.
func TestAckOutcomes(t *testing.T) {
	for _, c := range leaseCases() {
		t.Run(c.name, func(t *testing.T) {
			h := newLeaseHarness(t)
			r := c.setup(h)
			h.one(tickCmd()) // settle what is due, so the digest compares only the ack
			acked := h.f.Counters().GetAcked()
			before := stateDigest(t, h.f)
			res := h.mustOK(ackCmd(r)).GetItems().GetItems()
			if len(res) != 1 {
				t.Fatalf("%d item results", len(res))
			}
			it := res[0]
			if it.GetStatus().GetCode() != c.ack || it.GetAlreadyAcked() != c.alreadyAcked || !strings.Contains(it.GetStatus().GetMessage(), c.says) {
				t.Fatalf("ack = %v already_acked=%v, want %v already_acked=%v saying %q", it.GetStatus(), it.GetAlreadyAcked(), c.ack, c.alreadyAcked, c.says)
			}
			if c.ack == fsmpb.Code_CODE_OK && !c.alreadyAcked {
				if got := h.f.Counters().GetAcked(); got != acked+1 {
					t.Fatalf("acked counter %d -> %d, want one more", acked, got)
				}
				return
			}
			if stateDigest(t, h.f) != before || h.f.Counters().GetAcked() != acked {
				t.Fatal("an ack that settled nothing changed the state")
			}
		})
	}
}

// Nack, extend and dead-letter never succeed on a lease that is not live;
// in particular not on one already acked (the message is done and none of
// them may undo that), and they say why.
func TestSettleAfterLeaseEnded(t *testing.T) {
	cmds := map[string]func(r *fsmpb.Receipt) *fsmpb.Command{
		"nack":   func(r *fsmpb.Receipt) *fsmpb.Command { return nackCmd(nackDelay(r, 0, "x")) },
		"extend": func(r *fsmpb.Receipt) *fsmpb.Command { return extendCmd(r, 1000) },
		"dead":   func(r *fsmpb.Receipt) *fsmpb.Command { return deadLetterCmd(r, "x") },
	}
	for _, c := range leaseCases() {
		if c.other == fsmpb.Code_CODE_OK {
			continue // a live lease: the commands' own tests
		}
		for cname, mk := range cmds {
			t.Run(c.name+"/"+cname, func(t *testing.T) {
				h := newLeaseHarness(t)
				r := c.setup(h)
				h.one(tickCmd())
				before := stateDigest(t, h.f)
				it := h.mustOK(mk(r)).GetItems().GetItems()[0]
				if it.GetStatus().GetCode() != c.other || it.GetAlreadyAcked() || !strings.Contains(it.GetStatus().GetMessage(), c.otherSays) {
					t.Fatalf("%s = %v already_acked=%v, want %v saying %q", cname, it.GetStatus(), it.GetAlreadyAcked(), c.other, c.otherSays)
				}
				if stateDigest(t, h.f) != before {
					t.Fatalf("a refused %s changed the state", cname)
				}
			})
		}
	}
}

// One ack command may name a receipt twice (a client batching a retry with
// new receipts): the first settles it, the second is the repeat.
func TestAckRepeatInOneBatch(t *testing.T) {
	h := newLeaseHarness(t)
	h.mustEnqueue("q", body("b"))
	ms := h.mustReceive("q", 2, 1000)
	if len(ms) != 2 {
		t.Fatalf("received %d", len(ms))
	}
	r0, r1 := receipt(ms[0]), receipt(ms[1])
	stale := &fsmpb.Receipt{MessageId: r1.GetMessageId(), LeaseEpoch: r1.GetLeaseEpoch() + 100}
	items := h.mustOK(ackCmd(r0, r0, stale, r1)).GetItems().GetItems()
	type got struct {
		code fsmpb.Code
		dup  bool
	}
	want := []got{{fsmpb.Code_CODE_OK, false}, {fsmpb.Code_CODE_OK, true}, {fsmpb.Code_CODE_STALE_RECEIPT, false}, {fsmpb.Code_CODE_OK, false}}
	for i, it := range items {
		if g := (got{it.GetStatus().GetCode(), it.GetAlreadyAcked()}); g != want[i] {
			t.Errorf("item %d = %+v (%s), want %+v", i, g, it.GetStatus().GetMessage(), want[i])
		}
	}
	if n := h.f.Counters().GetAcked(); n != 2 {
		t.Fatalf("acked counter %d, want 2", n)
	}
}

// The repeat is judged from replicated state alone: a replica that
// restored a snapshot taken after the ack answers the repeat the same way.
func TestAckRepeatAfterSnapshotRestore(t *testing.T) {
	h := newLeaseHarness(t)
	r := leaseOne(h)
	h.mustOK(ackCmd(r))
	h.f = mustRestore(t, mustSnapshot(t, h.f))
	it := h.mustOK(ackCmd(r)).GetItems().GetItems()[0]
	if it.GetStatus().GetCode() != fsmpb.Code_CODE_OK || !it.GetAlreadyAcked() {
		t.Fatalf("repeat ack after restore = %v already_acked=%v, want OK already_acked", it.GetStatus(), it.GetAlreadyAcked())
	}
}
