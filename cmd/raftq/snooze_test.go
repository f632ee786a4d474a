package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/raftq/raftq/client/clienttest"
)

// A job on its only allowed receive, snoozed from the CLI, comes back on
// its first receive instead of going to the DLQ.
func TestSnoozeGivesTheReceiveBack(t *testing.T) {
	s := clienttest.NewServer(t)
	a := s.Addr
	mustRun(t, a, "queue", "create", "jobs", "--max-receives", "1")
	id := strings.TrimSpace(mustRun(t, a, "send", "jobs", "later"))
	var got []map[string]any
	if err := json.Unmarshal([]byte(mustRun(t, a, "receive", "jobs", "--json")), &got); err != nil || len(got) != 1 {
		t.Fatalf("receive --json: %v %v", got, err)
	}
	receipt := got[0]["receipt"].(string)
	if out := mustRun(t, a, "snooze", receipt, "--reason", "not yet"); out != "snoozed\n" {
		t.Fatalf("snooze printed %q", out)
	}
	out := mustRun(t, a, "message", "get", id)
	for _, row := range [][2]string{{"state", "ready"}, {"receives", "0"}} {
		if !hasRow(out, row[0], row[1]) {
			t.Fatalf("message get lacks %s %s:\n%s", row[0], row[1], out)
		}
	}
	if !strings.Contains(out, "snoozed") || !strings.Contains(out, "not yet") {
		t.Fatalf("history lacks the snooze and its reason:\n%s", out)
	}
	if err := json.Unmarshal([]byte(mustRun(t, a, "receive", "jobs", "--json")), &got); err != nil || len(got) != 1 || got[0]["receive_count"] != float64(1) {
		t.Fatalf("redelivery %v %v: want the job on its first receive", got, err)
	}
	// A repeat with the spent receipt is stale: exit 1.
	if r := raftq(t, a, "", "snooze", receipt); r.code != exitServer || !strings.Contains(r.stderr, "stale receipt") {
		t.Fatalf("snooze of a stale receipt: %+v", r)
	}
}

func TestSnoozeUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"snooze"}, "want 1 argument(s) RECEIPT, got 0"},
		{[]string{"snooze", "r", "--delay", "-1s"}, "--delay -1s is negative"},
		{[]string{"snooze", "r", "--delay", "9000h"}, "--delay 9000h0m0s is above the limit"},
		{[]string{"snooze", "r", "--reason", strings.Repeat("x", 1025)}, "--reason of 1025 bytes is above the limit 1024"},
	} {
		r := raftq(t, "127.0.0.1:1", "", c.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d stderr %q, want usage error with %q", c.args, r.code, r.stderr, c.want)
		}
	}
}
