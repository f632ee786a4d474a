package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/raftq/raftq/client/clienttest"
)

// A unique job from the CLI: the second send names the first job, and once
// that job is acked the key is free again.
func TestSendUniqueUntilDone(t *testing.T) {
	s := clienttest.NewServer(t)
	a := s.Addr
	mustRun(t, a, "queue", "create", "reports")
	first := strings.TrimSpace(mustRun(t, a, "send", "reports", "build", "--dedup", "report-7", "--unique-until-done"))
	if got := mustRun(t, a, "send", "reports", "build", "--dedup", "report-7", "--unique-until-done"); got != first+" (deduplicated: an earlier message had this key)\n" {
		t.Fatalf("second send printed %q, want the first job %s", got, first)
	}
	var got []map[string]any
	if err := json.Unmarshal([]byte(mustRun(t, a, "receive", "reports", "--json")), &got); err != nil || len(got) != 1 {
		t.Fatalf("receive: %v %v", got, err)
	}
	mustRun(t, a, "ack", got[0]["receipt"].(string))
	next := mustRun(t, a, "send", "reports", "build", "--dedup", "report-7", "--unique-until-done")
	if strings.Contains(next, "deduplicated") || strings.TrimSpace(next) == first {
		t.Fatalf("send after the ack printed %q, want a new job", next)
	}
}
