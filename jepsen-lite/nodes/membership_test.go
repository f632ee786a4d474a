package nodes

import (
	"slices"
	"strings"
	"testing"

	"github.com/raftq/raftq/jepsen-lite/netns"
)

// The first slots are the bootstrap members and the rest spares: a spare
// cannot be started except by Join, a retired member's slot is a spare
// again, and its id no longer maps to a slot.
func TestSlotsBookkeeping(t *testing.T) {
	nw := &netns.Net{}
	for i := range 5 {
		nw.Nodes = append(nw.Nodes, netns.NS{Name: "ns" + string(rune('1'+i)), IP: "10.99.1." + string(rune('1'+i))})
	}
	c, err := New("/bin/false", t.TempDir(), nw, 4, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer c.KillAll(t.Context())
	if m, s := c.Members(), c.Spares(); !slices.Equal(m, []int{0, 1, 2}) || !slices.Equal(s, []int{3, 4}) {
		t.Fatalf("members %v, spares %v", m, s)
	}
	if c.NodeID(2) != "n3" || c.Index("n3") != 2 || c.Index("n4") != -1 {
		t.Fatalf("ids: slot 2 %q, n3 at %d, n4 at %d", c.NodeID(2), c.Index("n3"), c.Index("n4"))
	}
	if err := c.Start(3, 0); err == nil || !strings.Contains(err.Error(), "spare") {
		t.Fatalf("a spare started: %v", err)
	}
	if err := c.Retire(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	if m := c.Members(); !slices.Equal(m, []int{0, 2}) || c.Index("n2") != -1 {
		t.Fatalf("after retiring n2: members %v, n2 at %d", m, c.Index("n2"))
	}
	if _, err := New("/bin/false", t.TempDir(), nw, 4, 6); err == nil {
		t.Fatal("6 initial nodes in 5 slots accepted")
	}
}
