package checker

import (
	"strings"
	"testing"

	"github.com/raftq/raftq/jepsen-lite/history"
)

// grown is a run whose shard count grew from 2 to 3 while FIFO group g
// was in use: its older message x stayed on shard 1 (epochs there are in
// the fifties), its newer y went to the new shard 2 (epochs from 1),
// leased once x was acked (ended at 2100 on shard 1's clock). yStart is
// y's lease start on shard 2's clock; xDeadline x's lease deadline
// (extended); xAcked: x's ack succeeded and the server records it.
func grown(yStart, xDeadline int64, xAcked bool) []history.Op {
	b := &builder{}
	st := setup()
	st.Nemesis = []string{"reshard"}
	b.phase(history.Info, history.PhaseSetup, history.Op{Setup: st})
	b.fault("reshard", "reshard grow 2 -> 3 shards; kill -9 n1 (meta leader) during move 1 of 85 slots 1 -> 2 (route)")
	b.enqueue(1, "f", "g", "x", history.OK, "1-10")
	b.enqueue(1, "f", "g", "y", history.OK, "2-1")
	b.receive(2, "f", dl("1-10", "x", 50, 2000, "g"))
	if xDeadline > 2500 {
		b.extend(2, "1-10", 50, xDeadline)
	}
	xRec := history.Record{State: history.StateLeased, LeaseEpoch: 50, LeaseDeadMs: xDeadline, Attempts: []history.Attempt{{Epoch: 50, ReceivedMs: 2000}}}
	if xAcked {
		b.ack(2, "1-10", 50, history.OK)
		xRec = history.Record{State: history.StateAcked, Attempts: []history.Attempt{{Epoch: 50, ReceivedMs: 2000, EndedMs: 2100, Outcome: history.OutAcked}}}
	}
	b.receive(3, "f", dl("2-1", "y", 1, yStart, "g"))
	b.ack(3, "2-1", 1, history.OK)
	b.phase(history.Info, history.PhaseHeal, history.Op{})
	b.phase(history.Info, history.PhaseDrain, history.Op{})
	b.final("1-10", xRec)
	b.final("2-1", history.Record{State: history.StateAcked, Attempts: []history.Attempt{{Epoch: 1, ReceivedMs: yStart, EndedMs: yStart + 50, Outcome: history.OutAcked}}})
	// The comparison lists the grown count: more shards than the setup's.
	rs := replicas()
	third := rs[1]
	third.Shard = 2
	b.phase(history.OK, history.PhaseReplicas, history.Op{Shards: append(rs, third)})
	b.phase(history.OK, history.PhaseFinal, history.Op{})
	return b.ops
}

// A group whose slot moved to a new shard: the newer message's epochs on
// the new shard are below the older's on the old one, which is no
// reorder; order across shards is judged on the shard clocks, within
// their slack (2 × the clock bound + 250 ms).
func TestGroupAcrossAGrowthIsJudgedOnTheClocks(t *testing.T) {
	for _, tc := range []struct {
		name          string
		yStart, xDead int64
		xAcked        bool
		kind          string // "" valid, else the order violation
	}{
		{"y leased after x's ack", 2150, 2500, true, ""},
		{"y leased within the clock slack before x's lease", 1900, 2500, true, ""},
		{"y leased long before x's lease", 500, 2500, true, "reordered"},
		{"y leased while x's extended lease held", 3000, 5000, false, "two-in-flight"},
		{"y leased within the slack of x's lease end", 4000, 5000, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ops := grown(tc.yStart, tc.xDead, tc.xAcked)
			rs := check(t, ops)
			for name, r := range rs {
				if name == "order" && tc.kind != "" {
					continue
				}
				if name == "total-queue" && !tc.xAcked {
					continue // x is left unfinished on purpose
				}
				if !r.Valid {
					t.Errorf("%s flagged: %v", name, r.Violations)
				}
			}
			if tc.kind == "" {
				return
			}
			r := rs["order"]
			if r.Valid || r.Count[tc.kind] == 0 || !strings.Contains(strings.Join(r.Violations, "\n"), "shard 2") {
				t.Fatalf("order did not flag %s across shards: %s %v", tc.kind, r.Summary(), r.Violations)
			}
		})
	}
}

// The comparison after a growth has more shards than the setup's count;
// a shard missing below the highest one compared is still flagged.
func TestGrownShardMissingFromTheComparison(t *testing.T) {
	ops := mutateOps(grown(2150, 2500, true), isPhase(history.PhaseReplicas), func(op *history.Op) {
		op.Shards = append(op.Shards[:1], op.Shards[2]) // shards 0 and 2: 1 is missing
	})
	r := check(t, ops)["final"]
	if r.Valid || r.Count["not-converged"] == 0 || !strings.Contains(strings.Join(r.Violations, "\n"), "shard 1 is missing") {
		t.Fatalf("a missing shard passed: %s %v", r.Summary(), r.Violations)
	}
}
