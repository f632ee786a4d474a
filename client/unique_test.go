package client

import (
	"testing"

	"github.com/raftq/raftq/client/clienttest"
)

// A unique job's key sends through: held while the job waits, free once it
// is acked, and the answer says which.
func TestUniqueUntilDoneSend(t *testing.T) {
	s := clienttest.NewServer(t)
	c := mustDial(t, []string{s.Addr})
	ctx := testCtx(t)
	mustCreate(t, c, "jobs", QueueOptions{})
	first := mustSend(t, c, "jobs", "a", Unique("report-7", UniqueUntilDone()))
	again := mustSend(t, c, "jobs", "b", Unique("report-7", UniqueUntilDone()))
	if first.Deduplicated || !again.Deduplicated || again.ID != first.ID {
		t.Fatalf("first %+v, second %+v: want the second to return the first", first, again)
	}
	m := mustReceive(t, c, "jobs", 1)[0]
	if err := c.Ack(ctx, m.Receipt); err != nil {
		t.Fatal(err)
	}
	next := mustSend(t, c, "jobs", "c", Unique("report-7", UniqueUntilDone()))
	if next.Deduplicated || next.ID == first.ID {
		t.Fatalf("send after the ack: %+v, want a new job", next)
	}
}
