package cluster

import (
	"fmt"
	"testing"
	"time"
)

// formatsEverywhere is nil once every running node's meta replica records
// want (node id -> format).
func (tc *testCluster) formatsEverywhere(want map[string]uint32) error {
	for id, n := range tc.nodes {
		for node, f := range want {
			if got := n.Meta().NodeFormat(node); got != f {
				return fmt.Errorf("%s records %s at format %d, want %d", id, node, got, f)
			}
		}
	}
	return nil
}

// Each node's advertised log format reaches the meta log, so every node
// holds the same record (what the shard and meta leaders gate new command
// kinds on); a node restarted on a binary of a newer format has its record
// raised on every node.
func TestCluster_LogFormatsRecordedThroughMeta(t *testing.T) {
	tc := newTestCluster(t)
	ids := []string{"n1", "n2", "n3"}
	for _, id := range ids {
		tc.define(id, 3)
	}
	for _, id := range ids {
		cfg := tc.cfgs[id]
		cfg.Join = []string{tc.cfgs["n1"].GossipBind, tc.cfgs["n2"].GossipBind, tc.cfgs["n3"].GossipBind}
		cfg.logFormat = 2 // a release newer than this binary's
		if id == "n3" {
			cfg.logFormat = 1 // pinned at the older format
		}
		tc.cfgs[id] = cfg
	}
	for _, id := range ids {
		tc.start(id)
	}
	tc.waitReady(30 * time.Second)
	waitFor(t, 20*time.Second, "formats recorded", func() error {
		return tc.formatsEverywhere(map[string]uint32{"n1": 2, "n2": 2, "n3": 1})
	})

	// The rolling upgrade reaches n3.
	tc.stop("n3")
	cfg := tc.cfgs["n3"]
	cfg.logFormat = 2
	tc.cfgs["n3"] = cfg
	tc.start("n3")
	waitFor(t, 30*time.Second, "n3's new format recorded", func() error {
		return tc.formatsEverywhere(map[string]uint32{"n1": 2, "n2": 2, "n3": 2})
	})
}
