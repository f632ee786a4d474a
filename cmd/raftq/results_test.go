package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/raftq/raftq/client/clienttest"
)

// receiveOne leases one message of queue and returns its receipt.
func receiveOne(t *testing.T, addr, queue string) string {
	t.Helper()
	var got []map[string]any
	out := mustRun(t, addr, "receive", queue, "--wait", "2s", "--json")
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got) != 1 {
		t.Fatalf("receive --json: %v\n%s", err, out)
	}
	return got[0]["receipt"].(string)
}

func TestAckResultAndMessageWait(t *testing.T) {
	s := clienttest.NewServer(t)
	a := s.Addr
	out := mustRun(t, a, "queue", "create", "jobs", "--completed-retention", "48h", "--completed-max-bytes-per-shard", "131072")
	if !hasRow(out, "completed-retention", "48h0m0s") || !hasRow(out, "completed-max-bytes-per-shard", "131072") {
		t.Fatalf("queue create output:\n%s", out)
	}
	id := strings.TrimSpace(mustRun(t, a, "send", "jobs", "resize cat.png"))

	// A waiter started before the job is even leased gets its result.
	waited := make(chan result, 1)
	go func() { waited <- raftq(t, a, "", "message", "wait", "jobs", id, "--wait", "30s", "--json") }()
	receipt := receiveOne(t, a, "jobs")
	if r := raftq(t, a, "thumb.png 64x64", "ack-result", receipt, "-"); r.code != exitOK || !strings.Contains(r.stdout, "15-byte result") {
		t.Fatalf("ack-result: %+v", r)
	}
	r := <-waited
	var m map[string]any
	if r.code != exitOK || json.Unmarshal([]byte(r.stdout), &m) != nil || m["state"] != "acked" || m["result"] != "thumb.png 64x64" {
		t.Fatalf("message wait: %+v", r)
	}
	if out := mustRun(t, a, "message", "get", id); !strings.Contains(out, "result       thumb.png 64x64\n") || !hasRow(out, "state", "acked") {
		t.Fatalf("message get:\n%s", out)
	}
	var st map[string]any
	if err := json.Unmarshal([]byte(mustRun(t, a, "queue", "stats", "jobs", "--json")), &st); err != nil ||
		st["completed"] != float64(1) || st["completed_bytes"] != float64(15) || st["completed_evicted"] != float64(0) {
		t.Fatalf("queue stats: %v %v", st, err)
	}
	// The moves (QueueStats.moves) are in the JSON only.
	if mv, ok := st["moves"].(map[string]any); !ok || mv["sent"] != float64(1) || mv["received"] != float64(1) || mv["acked"] != float64(1) {
		t.Fatalf("queue stats --json: moves %v, want sent, received and acked 1", st["moves"])
	}
	if out := mustRun(t, a, "queue", "stats", "jobs"); strings.Contains(out, "acked") {
		t.Fatalf("queue stats table shows the moves:\n%s", out)
	}
}

func TestMessageWaitOutcomes(t *testing.T) {
	s := clienttest.NewServer(t)
	a := s.Addr
	mustRun(t, a, "queue", "create", "jobs", "--max-receives", "1")
	mustRun(t, a, "queue", "create", "other")
	stuck := strings.TrimSpace(mustRun(t, a, "send", "jobs", "never leased"))
	// Unfinished when the wait runs out: the record is shown, exit 3.
	if r := raftq(t, a, "", "message", "wait", "jobs", stuck, "--wait", "300ms"); r.code != exitUnavailable ||
		!hasRow(r.stdout, "state", "ready") || !strings.Contains(r.stderr, "still ready after --wait 300ms") {
		t.Fatalf("wait on an unfinished job: %+v", r)
	}
	// The id of another queue's message is refused.
	if r := raftq(t, a, "", "message", "wait", "other", stuck); r.code != exitServer || !strings.Contains(r.stderr, `belongs to queue "jobs"`) {
		t.Fatalf("wait with the wrong queue: %+v", r)
	}
	// A job that ends dead: exit 1, with its reason.
	mustRun(t, a, "nack", receiveOne(t, a, "jobs"), "--error", "boom")
	if r := raftq(t, a, "", "message", "wait", "jobs", stuck); r.code != exitServer || !hasRow(r.stdout, "state", "dead") || !strings.Contains(r.stderr, "is dead") {
		t.Fatalf("wait on a dead job: %+v", r)
	}
	// Results above 64 KiB are refused before anything is sent.
	if r := raftq(t, a, strings.Repeat("x", 64<<10+1), "ack-result", "r", "-"); r.code != exitUsage || !strings.Contains(r.stderr, "above the limit of 65536") {
		t.Fatalf("oversized result: %+v", r)
	}
	if r := raftq(t, a, "", "queue", "update", "jobs", "--completed-max-bytes-per-shard", "100"); r.code != exitUsage {
		t.Fatalf("tiny result bound: %+v", r)
	}
	if r := raftq(t, a, "", "message", "wait", "jobs", "not-an-id"); r.code != exitServer {
		t.Fatalf("wait on a malformed id: %+v", r)
	}
}
