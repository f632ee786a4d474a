package fsm

import (
	"slices"
	"testing"

	"github.com/raftq/raftq/fsm/fsmpb"
)

func pausedPolicy(p *fsmpb.QueuePolicy) *fsmpb.QueuePolicy {
	p = clonePolicy(p)
	p.Paused = true
	return p
}

// A paused queue leases nothing, answers receives empty (not an error),
// and still takes sends and settles the leases it granted before.
func TestPausedQueueLeasesNothing(t *testing.T) {
	for _, c := range []struct {
		name   string
		policy *fsmpb.QueuePolicy
		msgs   []*fsmpb.NewMessage
	}{
		{"standard", &fsmpb.QueuePolicy{}, []*fsmpb.NewMessage{body("a"), body("b"), body("c")}},
		{"fifo", fifoPolicy(), []*fsmpb.NewMessage{grouped("g1", "a"), grouped("g2", "b"), grouped("g3", "c")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			h.mustQueue("q", c.policy)
			h.mustEnqueue("q", c.msgs...)
			held := h.mustReceive("q", 1, 10_000)
			if len(held) != 1 {
				t.Fatalf("received %d before the pause, want 1", len(held))
			}
			h.mustQueue("q", pausedPolicy(c.policy))

			if got := h.mustReceive("q", 10, 10_000); len(got) != 0 {
				t.Fatalf("paused queue leased %v", ids(got))
			}
			if n, ok := h.f.Leasable("q"); !ok || n != 0 {
				t.Fatalf("Leasable of a paused queue = %d, %v; want 0, true", n, ok)
			}
			h.mustEnqueue("q", grouped("g4", "d"))
			if codes := h.itemCodes(ackCmd(receipt(held[0]))); codes[0] != fsmpb.Code_CODE_OK {
				t.Fatalf("ack of a lease granted before the pause: %v", codes)
			}
			st := h.mustStats("q")
			if st.Ready != 3 || st.InFlight != 0 || st.Leasable != 0 {
				t.Fatalf("stats while paused: %+v, want 3 ready, none in flight or leasable", st)
			}

			h.woken = nil
			h.mustQueue("q", c.policy)
			if !slices.Contains(h.woken, "q") {
				t.Fatalf("resume woke %v, want the queue's long polls", h.woken)
			}
			if got := h.mustReceive("q", 10, 10_000); len(got) != 3 {
				t.Fatalf("after resume received %d, want 3", len(got))
			}
		})
	}
}

// An expired lease of a paused queue returns its message to ready, where
// it stays until the resume.
func TestPausedQueueHoldsExpiredLeases(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("q", &fsmpb.QueuePolicy{})
	h.mustEnqueue("q", body("a"))
	h.mustReceive("q", 1, 1_000)
	h.mustQueue("q", pausedPolicy(&fsmpb.QueuePolicy{}))
	h.now += 2_000
	if got := h.mustReceive("q", 1, 1_000); len(got) != 0 {
		t.Fatalf("paused queue leased an expired message again: %v", ids(got))
	}
	if st := h.mustStats("q"); st.Ready != 1 {
		t.Fatalf("stats %+v, want the expired message ready", st)
	}
}

// A paused queue at its in-flight quota answers empty, not with the
// quota's refusal: the pause, not the quota, is why nothing is leased.
func TestPausedQueueIsNotAtQuota(t *testing.T) {
	h := newHarness(t)
	p := &fsmpb.QueuePolicy{ShardQuota: &fsmpb.ShardQuota{MaxInFlight: 1}}
	h.mustQueue("q", p)
	h.mustEnqueue("q", body("a"), body("b"))
	h.mustReceive("q", 1, 10_000)
	if h.f.InFlightRefusal("q") == nil {
		t.Fatal("queue at its in-flight quota has no refusal: the test proves nothing")
	}
	h.mustQueue("q", pausedPolicy(p))
	if st := h.f.InFlightRefusal("q"); st != nil {
		t.Fatalf("paused queue refused for its quota: %v", st)
	}
	if r := h.one(receiveCmd("q", 1, 10_000)); r.GetStatus().GetCode() != fsmpb.Code_CODE_OK || len(r.GetReceive().GetMessages()) != 0 {
		t.Fatalf("receive from a paused queue at quota: %v", r)
	}
}

// The pause is part of the queue's policy, so a restored replica keeps it
// and continues exactly like the original.
func TestPauseSurvivesSnapshot(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("q", pausedPolicy(&fsmpb.QueuePolicy{}))
	h.mustEnqueue("q", body("a"), body("b"))
	r := mustRestore(t, mustSnapshot(t, h.f))
	h2 := &harness{t: t, f: r, index: h.index, term: h.term, now: h.now, seed: h.seed}
	for _, hh := range []*harness{h, h2} {
		if got := hh.mustReceive("q", 10, 10_000); len(got) != 0 {
			t.Fatalf("leased %v from a paused queue", ids(got))
		}
		hh.mustQueue("q", &fsmpb.QueuePolicy{})
		if got := hh.mustReceive("q", 10, 10_000); len(got) != 2 {
			t.Fatalf("after resume received %d, want 2", len(got))
		}
	}
	d1, _ := mustDigest(t, h.f)
	d2, _ := mustDigest(t, h2.f)
	if d1 != d2 {
		t.Fatal("restored replica diverged after the resume")
	}
}

// Only a pausing upsert needs format 7; a resume reads alike on a replica
// of format 6.
func TestPauseFormat(t *testing.T) {
	for _, c := range []struct {
		name string
		cmd  *fsmpb.Command
		want uint32
	}{
		{"pause", upsertCmd("q", &fsmpb.QueuePolicy{Paused: true}), 7},
		{"pause of a tenant's queue", upsertCmd("acme/q", &fsmpb.QueuePolicy{Paused: true}), 7},
		{"resume", upsertCmd("q", &fsmpb.QueuePolicy{}), 1},
		{"resume of a tenant's queue", upsertCmd("acme/q", &fsmpb.QueuePolicy{}), 6},
	} {
		if got := CommandFormat(c.cmd); got != c.want {
			t.Errorf("%s: format %d, want %d", c.name, got, c.want)
		}
	}
}
