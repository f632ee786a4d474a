package cluster

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

// TestGossipKeyRotation rotates the gossip key of a running pair of
// nodes the way docs/security.md says (add, switch, drop) and checks that
// they keep hearing each other, and that a node holding only the old key
// is shut out afterwards.
func TestGossipKeyRotation(t *testing.T) {
	k1, k2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	tc := newTestCluster(t)
	withKeys := func(c Config, keys ...[]byte) {
		c.GossipKeys = keys
		tc.cfgs[c.NodeID] = c
	}
	withKeys(tc.define("g1", 0), k1)
	withKeys(tc.define("g2", 0, "g1"), k1)
	g1, g2 := tc.start("g1"), tc.start("g2")
	sees := func(n *Node, id string) error {
		m, ok := n.gossip.get(id)
		if !ok || m.State != "alive" {
			return fmt.Errorf("%s sees %s as %+v", n.NodeID(), id, m)
		}
		return nil
	}
	waitFor(t, 10*time.Second, "g1 and g2 alive to each other", func() error {
		if err := sees(g1, "g2"); err != nil {
			return err
		}
		return sees(g2, "g1")
	})
	for _, step := range [][][]byte{{k1, k2}, {k2, k1}, {k2}} {
		for _, n := range []*Node{g1, g2} {
			if err := n.SetGossipKeys(step); err != nil {
				t.Fatalf("%s: %v", n.NodeID(), err)
			}
		}
	}
	// Several probe rounds (500 ms each) under the new key alone.
	time.Sleep(3 * time.Second)
	for _, pair := range [][2]*Node{{g1, g2}, {g2, g1}} {
		if err := sees(pair[0], pair[1].NodeID()); err != nil {
			t.Fatalf("after the rotation: %v", err)
		}
	}
	withKeys(tc.define("g3", 0, "g1"), k1)
	g3 := tc.start("g3")
	time.Sleep(3 * time.Second)
	if _, ok := g1.gossip.get("g3"); ok {
		t.Fatal("g1 let in g3, which holds only the retired key")
	}
	if err := g3.SetGossipKeys(nil); err == nil {
		t.Fatal("a node dropped every gossip key")
	}
	tc.define("g4", 0)
	if err := tc.start("g4").SetGossipKeys([][]byte{k1}); err == nil {
		t.Fatal("a node started without keys took keys at run time")
	}
}
