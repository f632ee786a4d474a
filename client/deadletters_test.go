package client

import (
	"testing"
	"time"

	"github.com/raftq/raftq/client/clienttest"
)

// The retry policy and dead-letter calls of docs/jobs.md, against the
// in-process fake: the options reach the server and its answers come back.
func TestDeadLetterCalls(t *testing.T) {
	s := clienttest.NewServer(t)
	c := mustDial(t, []string{s.Addr})
	ctx := testCtx(t)
	mustCreate(t, c, "jobs", QueueOptions{})
	mustCreate(t, c, "retry", QueueOptions{DeadRetention: 14 * 24 * time.Hour})
	if q, err := c.GetQueue(ctx, "retry"); err != nil || q.Options.DeadRetention != 14*24*time.Hour {
		t.Fatalf("dead retention: %+v, %v", q.Options, err)
	}
	if _, err := c.Send(ctx, "jobs", []byte("x"), Backoff(-time.Second, 0)); err == nil {
		t.Fatal("a negative backoff was sent")
	}
	sent := mustSend(t, c, "jobs", "a", Type("email"), MaxAttempts(1), Backoff(time.Second, time.Minute))
	mustSend(t, c, "jobs", "b", Type("sms"), MaxAttempts(1))
	ms, err := c.Receive(ctx, "jobs", ReceiveOptions{Max: 2})
	if err != nil || len(ms) != 2 {
		t.Fatalf("receive: %d, %v", len(ms), err)
	}
	for _, m := range ms {
		if err := c.Nack(ctx, m.Receipt, NackOptions{Error: "boom " + m.Type}); err != nil {
			t.Fatal(err)
		}
	}
	info, err := c.GetMessage(ctx, sent.ID)
	if err != nil || info.State != "dead" || info.MaxReceives != 1 || info.BackoffBase != time.Second || info.BackoffMax != time.Minute {
		t.Fatalf("message %+v, %v", info, err)
	}
	dead, next, err := c.ListDeadMatching(ctx, "jobs", &DeadFilter{Type: "email"}, 10, "")
	if err != nil || len(dead) != 1 || dead[0].ID != sent.ID || next != "" {
		t.Fatalf("filtered list: %d, %q, %v", len(dead), next, err)
	}
	plan, err := c.RedriveDryRun(ctx, "jobs", RedriveOptions{Target: "retry", Filter: &DeadFilter{ErrorContains: "boom"}})
	if err != nil || plan.Matched != 2 || len(plan.Messages) != 2 {
		t.Fatalf("dry run %+v, %v", plan, err)
	}
	n, err := c.Redrive(ctx, "jobs", RedriveOptions{Target: "retry", Filter: &DeadFilter{Type: "email"}})
	if err != nil || n != 1 {
		t.Fatalf("redrive to retry: %d, %v", n, err)
	}
	got, err := c.Receive(ctx, "retry", ReceiveOptions{})
	if err != nil || len(got) != 1 || string(got[0].Body) != "a" {
		t.Fatalf("target: %v, %v", got, err)
	}
}
