package checker

import (
	"testing"

	"github.com/raftq/raftq/jepsen-lite/history"
)

func cronMsg(id string, slot int64) history.Op {
	return history.Op{Type: history.OK, F: history.FCron, MessageID: id, Cron: &history.Cron{Schedule: "s", SlotMs: slot}}
}

func cronTrig(id string, n uint64) history.Op {
	return history.Op{Type: history.OK, F: history.FCron, MessageID: id, Cron: &history.Cron{Schedule: "s", Trigger: n}}
}

func cronState(last int64, fired, skipped uint64, misfire string) history.Op {
	return history.Op{Type: history.OK, F: history.FCronState, Cron: &history.Cron{Schedule: "s", EveryMs: 1000, CreatedMs: 10_000,
		Misfire: misfire, CatchUpMax: 100, LastSlotMs: last, Fired: fired, Skipped: skipped, TriggersFired: 1}}
}

func TestCronCheck(t *testing.T) {
	// Slots 11 s to 15 s, each once; slot 14 s received twice as the same
	// message (a lost ack); slot 16 s sent after the last record; one trigger.
	good := []history.Op{cronMsg("a", 11_000), cronMsg("b", 12_000), cronMsg("c", 13_000), cronMsg("d", 14_000),
		cronMsg("d", 14_000), cronMsg("e", 15_000), cronMsg("f", 16_000), cronTrig("t", 1), cronState(15_000, 5, 0, "catch-up")}
	for _, tc := range []struct {
		name string
		ops  []history.Op
		want string
	}{
		{"good", good, ""},
		{"double fire", append(append([]history.Op{}, good...), cronMsg("x", 12_000)), "cron-double-fire"},
		{"double fire after the record", append(append([]history.Op{}, good...), cronMsg("x", 16_000)), "cron-double-fire"},
		{"bogus slot", append(append([]history.Op{}, good...), cronMsg("x", 12_500)), "cron-bogus-slot"},
		{"double trigger", append(append([]history.Op{}, good...), cronTrig("u", 1)), "cron-double-trigger"},
		{"missed", []history.Op{cronMsg("a", 11_000), cronMsg("c", 13_000), cronTrig("t", 1), cronState(13_000, 3, 0, "skip")}, "cron-missed-slot"},
		{"skipped by policy", []history.Op{cronMsg("a", 11_000), cronMsg("c", 13_000), cronTrig("t", 1), cronState(13_000, 2, 1, "skip")}, ""},
		{"catch-up skipped", []history.Op{cronMsg("a", 11_000), cronMsg("c", 13_000), cronTrig("t", 1), cronState(13_000, 2, 1, "catch-up")}, "cron-skipped-within-catch-up"},
		{"record off", []history.Op{cronMsg("a", 11_000), cronTrig("t", 1), cronState(11_000, 2, 0, "skip")}, "cron-record"},
		{"lost trigger", []history.Op{cronMsg("a", 11_000), cronState(11_000, 1, 0, "skip")}, "cron-lost-trigger"},
		{"no record", []history.Op{cronMsg("a", 11_000)}, "cron-unknown"},
		{"unfinished", []history.Op{{Type: history.Fail, F: history.FCronState, Error: "boom"}}, "cron-final"},
		{"started, no final record", []history.Op{{Type: history.Invoke, F: history.FCronState}}, "cron-final"},
		{"idle schedule", []history.Op{{Type: history.Invoke, F: history.FCronState}, cronState(0, 0, 0, "skip")}, "cron-idle"},
	} {
		r := cronCheck(tc.ops)
		if tc.want == "" {
			if !r.Valid {
				t.Errorf("%s: %v", tc.name, r.Violations)
			}
			continue
		}
		if r.Valid || r.Count[tc.want] == 0 {
			t.Errorf("%s: want %s, got valid=%v %v", tc.name, tc.want, r.Valid, r.Violations)
		}
	}
}
