package fsm

import (
	"slices"
	"strings"
	"testing"

	"github.com/raftq/raftq/fsm/fsmpb"
)

func quotaPolicy(sq *fsmpb.ShardQuota) *fsmpb.QueuePolicy {
	return &fsmpb.QueuePolicy{MaxReceiveCount: 5, ShardQuota: sq}
}

// Each quota at its edge: the limit is taken, one more is refused with a
// message that names the quota.
func TestQuotaQueueDepthAndBytes(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("acme/jobs", quotaPolicy(&fsmpb.ShardQuota{MaxMessages: 3, MaxBytes: 1000}))
	if got := h.enqueueCodes("acme/jobs", body("a"), body("b"), body("c"), body("d")); !slices.Equal(got, []fsmpb.Code{codeOK, codeOK, codeOK, codeFull}) {
		t.Fatalf("depth 3: codes %v", got)
	}
	r := h.mustOK(enqueueCmd("acme/jobs", body("e")))
	if msg := r.GetEnqueue().GetItems()[0].GetStatus().GetMessage(); !strings.Contains(msg, "quotas.max_messages is 3") {
		t.Fatalf("refusal %q does not name the quota", msg)
	}
	// An ack frees a place.
	ms := h.mustReceive("acme/jobs", 1, 1000)
	h.mustOK(ackCmd(receipt(ms[0])))
	if got := h.enqueueCodes("acme/jobs", body("f")); !slices.Equal(got, []fsmpb.Code{codeOK}) {
		t.Fatalf("after an ack: %v", got)
	}

	h.mustQueue("acme/big", quotaPolicy(&fsmpb.ShardQuota{MaxBytes: 10}))
	if got := h.enqueueCodes("acme/big", body("0123456789"), body("x")); !slices.Equal(got, []fsmpb.Code{codeOK, codeFull}) {
		t.Fatalf("bytes 10: codes %v", got)
	}
	if err := checkInvariants(h.f); err != nil {
		t.Fatal(err)
	}
}

// A tenant's quota counts every queue of the tenant, and no other.
func TestQuotaTenantSharedAcrossQueues(t *testing.T) {
	h := newHarness(t)
	sq := &fsmpb.ShardQuota{TenantMaxMessages: 2, TenantMaxInFlight: 1}
	h.mustQueue("acme/a", quotaPolicy(sq))
	h.mustQueue("acme/b", quotaPolicy(sq))
	h.mustQueue("beta/a", quotaPolicy(sq))
	h.mustQueue("plain", quotaPolicy(sq))
	h.mustEnqueue("acme/a", body("1"))
	h.mustEnqueue("acme/b", body("2"))
	if got := h.enqueueCodes("acme/a", body("3")); !slices.Equal(got, []fsmpb.Code{codeFull}) {
		t.Fatalf("tenant at 2: %v", got)
	}
	r := h.mustOK(enqueueCmd("acme/b", body("3")))
	if msg := r.GetEnqueue().GetItems()[0].GetStatus().GetMessage(); !strings.Contains(msg, `tenant "acme" is at its quota`) {
		t.Fatalf("refusal %q does not name the tenant", msg)
	}
	// Another tenant and a queue of no tenant are not held back.
	h.mustEnqueue("beta/a", body("x"), body("y"))
	h.mustEnqueue("plain", body("x"), body("y"), body("z"))

	// In flight: one lease across the tenant; a second receive on any of
	// its queues is refused while messages are ready, and the stats show
	// nothing leasable.
	h.mustReceive("acme/a", 1, 1000)
	res := h.one(receiveCmd("acme/b", 1, 1000))
	if res.GetStatus().GetCode() != codeFull || !strings.Contains(res.GetStatus().GetMessage(), "max_in_flight") {
		t.Fatalf("receive past the tenant's in-flight quota: %v", res.GetStatus())
	}
	if st := h.mustStats("acme/b"); st.Ready != 1 || st.Leasable != 0 {
		t.Fatalf("stats at the in-flight quota %+v, want 1 ready, 0 leasable", st)
	}
	u := h.f.TenantUsage("acme")
	if u != (TenantUsage{Queues: 2, Live: 2, LiveBytes: 2, InFlight: 1}) {
		t.Fatalf("usage %+v", u)
	}
	// Deleting a queue gives its share back.
	h.mustOK(deleteCmd("acme/a"))
	h.mustEnqueue("acme/b", body("3"))
	if got := h.f.TenantUsage("acme"); got != (TenantUsage{Queues: 1, Live: 2, LiveBytes: 2}) {
		t.Fatalf("usage after delete %+v", got)
	}
	if err := checkInvariants(h.f); err != nil {
		t.Fatal(err)
	}
}

// The in-flight quota of a queue caps a batch receive at the room left,
// and an empty queue at its quota answers empty, not refused.
func TestQuotaInFlightCapsBatch(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("acme/q", quotaPolicy(&fsmpb.ShardQuota{MaxInFlight: 3}))
	h.mustEnqueue("acme/q", body("1"), body("2"), body("3"), body("4"), body("5"))
	if got := h.mustReceive("acme/q", 10, 1000); len(got) != 3 {
		t.Fatalf("leased %d of 10 asked, quota 3", len(got))
	}
	res := h.one(receiveCmd("acme/q", 1, 1000))
	if res.GetStatus().GetCode() != codeFull || !strings.Contains(res.GetStatus().GetMessage(), "quotas.max_in_flight is 3") {
		t.Fatalf("receive at the quota: %v", res.GetStatus())
	}
	h.mustQueue("acme/empty", quotaPolicy(&fsmpb.ShardQuota{MaxInFlight: 1}))
	h.mustEnqueue("acme/empty", body("1"))
	h.mustReceive("acme/empty", 1, 1000)
	if res := h.one(receiveCmd("acme/empty", 1, 1000)); res.GetStatus().GetCode() != codeOK || len(res.GetReceive().GetMessages()) != 0 {
		t.Fatalf("empty queue at its quota: %v", res)
	}
}

// Tenant usage is rebuilt by a restore from the queues' records.
func TestQuotaTenantUsageSurvivesSnapshot(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("acme/q", quotaPolicy(&fsmpb.ShardQuota{TenantMaxMessages: 10}))
	h.mustEnqueue("acme/q", body("12345"), body("6"))
	h.mustReceive("acme/q", 1, 1000)
	f2, err := snapshotCopy(h.f)
	if err != nil {
		t.Fatal(err)
	}
	if got := f2.TenantUsage("acme"); got != (TenantUsage{Queues: 1, Live: 2, LiveBytes: 6, InFlight: 1}) {
		t.Fatalf("restored usage %+v", got)
	}
	if err := checkInvariants(f2); err != nil {
		t.Fatal(err)
	}
}

func TestValidateQuotas(t *testing.T) {
	for _, c := range []struct {
		q      *fsmpb.Quotas
		tenant bool
		want   string
	}{
		{&fsmpb.Quotas{SendRate: 100, SendBurst: 10, MaxMessages: 1, MaxBytes: 1, MaxInFlight: 1}, false, ""},
		{&fsmpb.Quotas{MaxQueues: 5, MaxMessageBytes: 1024}, true, ""},
		{&fsmpb.Quotas{MaxQueues: 5}, false, "are a tenant's"},
		{&fsmpb.Quotas{SendBurst: 5}, false, "without send_rate"},
		{&fsmpb.Quotas{SendRate: MaxQuotaRate + 1}, false, "quotas.send_rate"},
		{&fsmpb.Quotas{MaxMessageBytes: MaxBodyBytes + 1}, true, "quotas.max_message_bytes"},
		{&fsmpb.Quotas{MaxMessages: 1 << 62}, false, "max_messages"},
	} {
		err := ValidateQuotas(c.q, c.tenant)
		if (err == nil) != (c.want == "") || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("ValidateQuotas(%v, %v) = %v, want %q", c.q, c.tenant, err, c.want)
		}
	}
}

// An ending lease wakes the long polls its in-flight quota held back: the
// queue's own, and every queue of a tenant that was at its quota.
func TestQuotaLeaseEndWakesWaiters(t *testing.T) {
	h := newHarness(t)
	sq := &fsmpb.ShardQuota{TenantMaxInFlight: 1}
	h.mustQueue("acme/a", quotaPolicy(sq))
	h.mustQueue("acme/b", quotaPolicy(sq))
	h.mustEnqueue("acme/a", body("1"))
	h.mustEnqueue("acme/b", body("2"))
	ms := h.mustReceive("acme/a", 1, 1000)
	if st := h.mustStats("acme/b"); st.Leasable != 0 {
		t.Fatalf("b leasable at the tenant's quota: %+v", st)
	}
	h.woken = nil
	h.mustOK(ackCmd(receipt(ms[0])))
	if !slices.Contains(h.woken, "acme/b") {
		t.Fatalf("the ack woke %v, want acme/b among them", h.woken)
	}
	if st := h.mustStats("acme/b"); st.Leasable != 1 {
		t.Fatalf("b after the ack: %+v", st)
	}
}
