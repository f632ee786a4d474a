package client

import (
	"testing"

	"github.com/raftq/raftq/client/clienttest"
)

// An ack whose answer is lost after the node applied it is retried (acks
// are safe to repeat), and the repeat is answered "already acked with this
// receipt", which the caller gets as success: the ack went through. Before
// raftq's acks were idempotent the caller got ErrStaleReceipt here, the
// answer for a message it had lost.
func TestRetriedAckAfterLostAnswerIsSuccess(t *testing.T) {
	s := clienttest.NewServer(t)
	c := mustDial(t, []string{s.Addr}, fastRetry(4))
	ctx := testCtx(t)
	mustCreate(t, c, "jobs", QueueOptions{})
	mustSend(t, c, "jobs", "a")
	ms := mustReceive(t, c, "jobs", 1)
	if len(ms) != 1 {
		t.Fatalf("received %d messages", len(ms))
	}
	s.LoseAnswer("Ack", 1)
	if err := c.Ack(ctx, ms[0].Receipt); err != nil {
		t.Fatalf("Ack after a lost answer = %v; want success", err)
	}
	if calls := s.Calls("Ack"); len(calls) != 2 {
		t.Fatalf("%d Ack calls, want the lost one and its retry: %+v", len(calls), calls)
	}
	if n := s.Count("jobs", clienttest.Acked); n != 1 {
		t.Fatalf("%d acked messages, want 1", n)
	}
}
