package client

import (
	"testing"

	"google.golang.org/grpc/codes"
)

// Status answers with the view of the node the caller named (its first
// seed that answers), not whichever node round robin picks: a node's
// damaged replicas are only in its own view, and `raftq --addr X cluster
// status` is how an operator looks at X.
func TestStatusAsksTheSeedsFirst(t *testing.T) {
	a, b := twoNodes(t)
	c := mustDial(t, []string{b.Addr})
	ctx := testCtx(t)
	for range 4 {
		st, err := c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.NodeID != b.NodeID {
			t.Fatalf("Status answered by %s, want the seed %s", st.NodeID, b.NodeID)
		}
	}
	if n := len(a.Calls("Status")); n != 0 {
		t.Fatalf("node A, not a seed, got %d status calls", n)
	}

	// A seed that fails hands over to the next seed, then to any node.
	c2 := mustDial(t, []string{a.Addr, b.Addr})
	a.Fail("Status", 1, codes.Unavailable)
	st, err := c2.Status(ctx)
	if err != nil || st.NodeID != b.NodeID {
		t.Fatalf("with seed A failing: %v from %v, want B", err, st)
	}
	c3 := mustDial(t, []string{b.Addr})
	b.Fail("Status", 1, codes.Unavailable)
	if _, err := c3.Status(ctx); err != nil {
		t.Fatalf("with the only seed failing once: %v", err)
	}
}
