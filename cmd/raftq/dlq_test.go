package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/client/clienttest"
)

// The dead-letter workflow of docs/jobs.md against the in-process fake:
// a per-message max receives, filtered listing, a dry run, a redrive to
// another queue, and dead retention on the queue.
func TestDeadLetterWorkflow(t *testing.T) {
	s := clienttest.NewServer(t)
	a := s.Addr
	mustRun(t, a, "queue", "create", "orders")
	out := mustRun(t, a, "queue", "create", "orders-retry", "--dead-retention", "336h")
	if !hasRow(out, "dead-retention", "336h0m0s") {
		t.Fatalf("queue create output:\n%s", out)
	}
	email := strings.TrimSpace(mustRun(t, a, "send", "orders", "e1", "--type", "email", "--max-receives", "1", "--backoff-base", "2s"))
	sms := strings.TrimSpace(mustRun(t, a, "send", "orders", "s1", "--type", "sms", "--max-receives", "1"))
	for _, want := range []struct{ id, errText string }{{email, "smtp 451"}, {sms, "carrier down"}} {
		out := mustRun(t, a, "receive", "orders", "--json")
		var got []map[string]any
		if err := json.Unmarshal([]byte(out), &got); err != nil || len(got) != 1 {
			t.Fatalf("receive: %v\n%s", err, out)
		}
		// One receive is the message's own max: a nack dead-letters it.
		mustRun(t, a, "nack", got[0]["receipt"].(string), "--error", want.errText)
	}
	out = mustRun(t, a, "dlq", "list", "orders", "--type", "email")
	if !strings.Contains(out, email) || strings.Contains(out, sms) {
		t.Fatalf("dlq list --type email:\n%s", out)
	}
	out = mustRun(t, a, "dlq", "list", "orders", "--error", "carrier")
	if strings.Contains(out, email) || !strings.Contains(out, sms) {
		t.Fatalf("dlq list --error carrier:\n%s", out)
	}
	out = mustRun(t, a, "dlq", "redrive", "orders", "--to", "orders-retry", "--type", "email", "--dry-run", "--json")
	var plan map[string]any
	if err := json.Unmarshal([]byte(out), &plan); err != nil || plan["matched"] != float64(1) || len(plan["would_move"].([]any)) != 1 {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	if out := mustRun(t, a, "dlq", "list", "orders"); !strings.Contains(out, email) {
		t.Fatal("a dry run moved the message")
	}
	if out := mustRun(t, a, "dlq", "redrive", "orders", "--to", "orders-retry", "--type", "email"); out != "redrove 1 message(s) to orders-retry\n" {
		t.Fatalf("redrive printed %q", out)
	}
	out = mustRun(t, a, "receive", "orders-retry", "--json")
	var got []map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got) != 1 || got[0]["body"] != "e1" {
		t.Fatalf("target receive: %v\n%s", err, out)
	}
	if out := mustRun(t, a, "dlq", "list", "orders"); strings.Contains(out, email) || !strings.Contains(out, sms) {
		t.Fatalf("source DLQ after the redrive:\n%s", out)
	}
	// The rest of docs/jobs.md's examples run as written.
	for _, args := range [][]string{
		{"dlq", "list", "orders", "--type", "email", "--error", "smtp 451", "--since", "24h"},
		{"dlq", "list", "orders", "--since", "2026-11-27T00:00:00Z", "--until", "2026-11-28T00:00:00Z", "--limit", "500"},
		{"dlq", "redrive", "orders", "--to", "orders-retry", "--type", "email", "--rate", "50"},
		{"send", "orders", `{"id":7}`, "--max-receives", "3", "--backoff-base", "10s", "--backoff-max", "10m"},
		{"queue", "update", "orders", "--dead-retention", "336h"},
		{"queue", "stats", "orders"},
	} {
		mustRun(t, a, args...)
	}
	if out := mustRun(t, a, "queue", "get", "orders"); !hasRow(out, "dead-retention", "336h0m0s") {
		t.Fatalf("queue get after update:\n%s", out)
	}
}

func TestDeadLetterUsageErrors(t *testing.T) {
	// Nothing listens here: usage errors must be caught before dialling.
	const nowhere = "127.0.0.1:1"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"dlq", "list", "q", "--since", "yesterday"}, `--since "yesterday" is neither an RFC 3339 time`},
		{[]string{"dlq", "list", "q", "--since", "1h", "--until", "2h"}, "--until 2h is not after --since 1h"},
		{[]string{"dlq", "redrive", "q", "--to", "q"}, "--to q is the queue itself"},
		{[]string{"dlq", "redrive", "q", "--ids", "0-1", "--type", "x"}, "give --ids or filter flags, not both"},
		{[]string{"send", "q", "b", "--max-receives", "0"}, "--max-receives 0 outside 1-1000"},
		{[]string{"send", "q", "b", "--max-receives", "1001"}, "--max-receives 1001 outside 1-1000"},
		{[]string{"send", "q", "b", "--backoff-base", "1m", "--backoff-max", "1s"}, "--backoff-max 1s is below --backoff-base 1m0s"},
		{[]string{"queue", "create", "q", "--dead-retention", "9000h"}, "--dead-retention 9000h0m0s is above the limit"},
	} {
		r := raftq(t, nowhere, "", c.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("raftq %v: exit %d, stderr %q; want exit %d and %q", c.args, r.code, r.stderr, exitUsage, c.want)
		}
	}
}

func TestPointInTime(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	if got, err := pointInTime("since", "24h", now); err != nil || !got.Equal(now.Add(-24*time.Hour)) {
		t.Fatalf("24h ago = %v, %v", got, err)
	}
	if got, err := pointInTime("since", "2026-11-27T00:00:00Z", now); err != nil || got.Day() != 27 {
		t.Fatalf("RFC 3339 = %v, %v", got, err)
	}
	if _, err := pointInTime("since", "-1h", now); err == nil {
		t.Fatal("a negative duration was taken")
	}
}
