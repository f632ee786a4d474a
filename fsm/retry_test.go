package fsm

import (
	"testing"

	"github.com/raftq/raftq/fsm/fsmpb"
)

// A message's own max_receive_count dead-letters it before the queue's
// would; a message without one keeps the queue's.
func TestMessageMaxReceivesOverridesQueue(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("q", &fsmpb.QueuePolicy{MaxReceiveCount: 10, BackoffBaseMs: 1, BackoffMaxMs: 1})
	own := h.mustEnqueue("q", &fsmpb.NewMessage{Body: []byte("own"), MaxReceiveCount: 2})[0]
	plain := h.mustEnqueue("q", body("plain"))[0]
	for round := 1; round <= 2; round++ {
		ms := h.mustReceive("q", 10, 1000)
		if len(ms) != 2 {
			t.Fatalf("round %d: received %v", round, ids(ms))
		}
		for _, m := range ms {
			h.mustOK(nackCmd(nackDelay(receipt(m), 0, "boom")))
		}
	}
	if m := h.mustMessage(own); m.GetState() != fsmpb.State_STATE_DEAD || m.GetDeadReason() != fsmpb.Reason_REASON_MAX_RECEIVES || m.GetMaxReceiveCount() != 2 {
		t.Fatalf("own policy: %v", m)
	}
	if m := h.mustMessage(plain); m.GetState() != fsmpb.State_STATE_READY || m.GetMaxReceiveCount() != 0 {
		t.Fatalf("queue policy: %v", m)
	}
	if err := checkInvariants(h.f); err != nil {
		t.Fatal(err)
	}
}

// A lease that expires counts against the message's own limit too.
func TestMessageMaxReceivesOnExpiry(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("q", nil)
	id := h.mustEnqueue("q", &fsmpb.NewMessage{MaxReceiveCount: 1})[0]
	h.mustReceive("q", 1, 100)
	h.now += 101
	h.mustOK(tickCmd())
	if m := h.mustMessage(id); m.GetState() != fsmpb.State_STATE_DEAD {
		t.Fatalf("after one expired lease: %v", m.GetState())
	}
}

// The nack backoff follows the message's own base and cap.
func TestMessageBackoffOverridesQueue(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("q", &fsmpb.QueuePolicy{BackoffBaseMs: 1, BackoffMaxMs: 1})
	const slow = 100_000
	var own []uint64
	for range 8 {
		own = append(own, h.mustEnqueue("q", &fsmpb.NewMessage{BackoffBaseMs: slow, BackoffMaxMs: slow})[0])
	}
	plain := h.mustEnqueue("q", body("plain"))[0]
	for _, m := range h.mustReceive("q", 10, 1000) {
		h.mustOK(nackCmd(nackBackoff(receipt(m), "boom")))
	}
	if m := h.mustMessage(plain); m.GetAvailableMs() > h.now+1 {
		t.Fatalf("queue backoff: available %d, now %d", m.GetAvailableMs(), h.now)
	}
	late := 0
	for _, id := range own {
		m := h.mustMessage(id)
		if m.GetAvailableMs() > h.now+slow {
			t.Fatalf("message %d delayed past its cap: %d", id, m.GetAvailableMs()-h.now)
		}
		if m.GetAvailableMs() > h.now+1 {
			late++
		}
	}
	if late < len(own)/2 {
		t.Fatalf("only %d of %d messages took their own backoff", late, len(own))
	}
}

func TestMessageRetryPolicyLimits(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("q", nil)
	for _, nm := range []*fsmpb.NewMessage{
		{MaxReceiveCount: MaxReceiveCountLimit + 1},
		{BackoffBaseMs: -1},
		{BackoffMaxMs: MaxDelayMs + 1},
		{BackoffBaseMs: 5000, BackoffMaxMs: 10},
	} {
		res := h.one(enqueueCmd("q", nm))
		if c := res.GetEnqueue().GetItems()[0].GetStatus().GetCode(); c != fsmpb.Code_CODE_INVALID_ARGUMENT {
			t.Errorf("%v: code %v", nm, c)
		}
	}
}

// The policy travels in snapshots, and a restored replica applies it.
func TestMessageRetryPolicySnapshot(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("q", nil)
	id := h.mustEnqueue("q", &fsmpb.NewMessage{MaxReceiveCount: 1, BackoffBaseMs: 7, BackoffMaxMs: 9})[0]
	h.f = mustRestore(t, mustSnapshot(t, h.f))
	m := h.mustMessage(id)
	if m.GetMaxReceiveCount() != 1 || m.GetBackoffBaseMs() != 7 || m.GetBackoffMaxMs() != 9 {
		t.Fatalf("restored %v", m)
	}
	h.mustOK(nackCmd(nackBackoff(receipt(h.mustReceive("q", 1, 1000)[0]), "x")))
	if got := h.mustMessage(id).GetState(); got != fsmpb.State_STATE_DEAD {
		t.Fatalf("restored policy not applied: %v", got)
	}
}

func TestRetryPolicyNeedsFormat7(t *testing.T) {
	if n := CommandFormat(enqueueCmd("q", body("x"))); n != 1 {
		t.Fatalf("plain enqueue needs %d", n)
	}
	if n := CommandFormat(enqueueCmd("q", body("x"), &fsmpb.NewMessage{BackoffMaxMs: 5})); n != 7 {
		t.Fatalf("enqueue with a retry policy needs %d", n)
	}
}
