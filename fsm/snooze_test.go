package fsm

import (
	"slices"
	"testing"

	"github.com/raftq/raftq/fsm/fsmpb"
)

func snoozeCmd(items ...*fsmpb.SnoozeItem) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_Snooze{Snooze: &fsmpb.Snooze{Items: items}}}
}

func snoozeItem(r *fsmpb.Receipt, delayMs int64, reason string) *fsmpb.SnoozeItem {
	return &fsmpb.SnoozeItem{Receipt: r, DelayMs: delayMs, Reason: reason}
}

// A message on its last allowed receive, snoozed again and again, is never
// dead-lettered by it; a nack afterwards still counts.
func TestSnoozeGivesBackTheAttempt(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("q", &fsmpb.QueuePolicy{MaxReceiveCount: 2})
	h.mustEnqueue("q", body("a"))
	ms := h.mustReceive("q", 1, 1000)
	h.mustOK(nackCmd(nackDelay(receipt(ms[0]), 0, "boom")))
	for i := range 5 {
		ms = h.mustReceive("q", 1, 1000)
		if len(ms) != 1 || ms[0].GetReceiveCount() != 2 {
			t.Fatalf("round %d: delivery %v, want receive count 2", i, ms)
		}
		if codes := h.itemCodes(snoozeCmd(snoozeItem(receipt(ms[0]), 0, "worker shut down"))); codes[0] != fsmpb.Code_CODE_OK {
			t.Fatalf("round %d: snooze %v", i, codes)
		}
		m := h.mustMessage(1)
		if m.GetState() != fsmpb.State_STATE_READY || m.GetReceiveCount() != 1 {
			t.Fatalf("round %d: after snooze state %v receive count %d, want ready and 1", i, m.GetState(), m.GetReceiveCount())
		}
		if m.GetLastError() != "boom" {
			t.Fatalf("round %d: last error %q, the snooze must keep the nack's", i, m.GetLastError())
		}
		last := m.GetHistory()[len(m.GetHistory())-1]
		if last.GetOutcome() != fsmpb.Reason_REASON_SNOOZED || last.GetError() != "worker shut down" || last.GetEndedMs() != h.now {
			t.Fatalf("round %d: last attempt %v", i, last)
		}
	}
	ms = h.mustReceive("q", 1, 1000)
	h.mustOK(nackCmd(nackDelay(receipt(ms[0]), 0, "boom again")))
	if m := h.mustMessage(1); m.GetState() != fsmpb.State_STATE_DEAD || m.GetDeadReason() != fsmpb.Reason_REASON_MAX_RECEIVES {
		t.Fatalf("a nack at the max receive count: state %v reason %v, want dead by max receives", m.GetState(), m.GetDeadReason())
	}
	if err := checkInvariants(h.f); err != nil {
		t.Fatal(err)
	}
}

func TestSnoozeDelaysByItsDelay(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("q", &fsmpb.QueuePolicy{MaxReceiveCount: 1})
	h.mustEnqueue("q", body("a"))
	ms := h.mustReceive("q", 1, 10_000)
	h.mustOK(snoozeCmd(snoozeItem(receipt(ms[0]), 5000, "")))
	if m := h.mustMessage(1); m.GetState() != fsmpb.State_STATE_DELAYED || m.GetAvailableMs() != h.now+5000 {
		t.Fatalf("after a 5 s snooze: %v available %d, want delayed until %d", m.GetState(), m.GetAvailableMs(), h.now+5000)
	}
	h.now += 4999
	if got := h.mustReceive("q", 1, 1000); len(got) != 0 {
		t.Fatalf("received %v before the snooze ended", got)
	}
	h.now++
	got := h.mustReceive("q", 1, 1000)
	if len(got) != 1 || got[0].GetReceiveCount() != 1 {
		t.Fatalf("after the snooze: %v, want the message on its first receive again", got)
	}
	if st := h.mustStats("q"); st.InFlight != 1 || st.Delayed != 0 || st.Dead != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestSnoozeRefusals(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("q", &fsmpb.QueuePolicy{})
	h.mustEnqueue("q", body("a"), body("b"))
	ms := h.mustReceive("q", 2, 1000)
	a, b := receipt(ms[0]), receipt(ms[1])
	h.mustOK(ackCmd(b))
	stale := &fsmpb.Receipt{MessageId: a.GetMessageId(), LeaseEpoch: a.GetLeaseEpoch() + 100}
	got := h.itemCodes(snoozeCmd(
		snoozeItem(a, -1, ""),
		snoozeItem(a, MaxDelayMs+1, ""),
		snoozeItem(b, 0, ""),
		snoozeItem(stale, 0, ""),
	))
	want := []fsmpb.Code{fsmpb.Code_CODE_INVALID_ARGUMENT, fsmpb.Code_CODE_INVALID_ARGUMENT, fsmpb.Code_CODE_STALE_RECEIPT, fsmpb.Code_CODE_STALE_RECEIPT}
	if !slices.Equal(got, want) {
		t.Fatalf("item codes %v, want %v", got, want)
	}
	if m := h.mustMessage(a.GetMessageId()); m.GetState() != fsmpb.State_STATE_LEASED || m.GetReceiveCount() != 1 {
		t.Fatalf("refused snoozes changed the message: %v", m)
	}
	h.now += 1000 // the lease ended: a snooze after it is stale too
	if got := h.itemCodes(snoozeCmd(snoozeItem(a, 0, ""))); got[0] != fsmpb.Code_CODE_STALE_RECEIPT {
		t.Fatalf("snooze of an expired lease: %v", got)
	}
	items := make([]*fsmpb.SnoozeItem, maxItemsPerLeaseCommandBatch+1)
	if r := h.one(snoozeCmd(items...)); r.GetStatus().GetCode() != fsmpb.Code_CODE_INVALID_ARGUMENT {
		t.Fatalf("a snooze of %d items: %v", len(items), r.GetStatus())
	}
}

// The message's retention outlasts no snooze: one whose retention ran out
// while it was leased goes dead on its hand-back, as on a nack.
func TestSnoozePastRetentionKills(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("q", &fsmpb.QueuePolicy{RetentionMs: 2000})
	h.mustEnqueue("q", body("a"))
	ms := h.mustReceive("q", 1, 10_000)
	h.now += 3000
	h.mustOK(snoozeCmd(snoozeItem(receipt(ms[0]), 0, "")))
	if m := h.mustMessage(1); m.GetState() != fsmpb.State_STATE_DEAD || m.GetDeadReason() != fsmpb.Reason_REASON_RETENTION {
		t.Fatalf("snoozed past retention: %v %v", m.GetState(), m.GetDeadReason())
	}
}

func TestSnoozeNeedsLogFormat7(t *testing.T) {
	if got := CommandFormat(snoozeCmd()); got != 7 {
		t.Fatalf("CommandFormat(snooze) = %d, want 7", got)
	}
	if got := CommandFormat(nackCmd()); got != 1 {
		t.Fatalf("CommandFormat(nack) = %d, want 1", got)
	}
}
