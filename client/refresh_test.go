package client

import (
	"testing"

	"github.com/raftq/raftq/client/clienttest"
)

// A node that is starting answers ShardMap with no shards. A client that
// refreshes its map through it must not drop the map another node has:
// it would route nothing to shard leaders until the next refresh.
func TestRefreshSkipsANodeWithoutAShardMap(t *testing.T) {
	starting, ready := clienttest.NewServer(t), clienttest.NewServer(t)
	starting.SetShardMap(0) // no shards yet
	ready.SetShardMap(0, ready.Addr, ready.Addr)
	c := mustDial(t, []string{starting.Addr, ready.Addr})
	if n := c.ShardCount(); n != 2 {
		t.Fatalf("shard count %d after dialling a starting node first, want the ready node's 2", n)
	}
	if err := c.refresh(testCtx(t), true); err != nil || c.ShardCount() != 2 {
		t.Fatalf("refresh = %v, shard count %d; want 2 kept", err, c.ShardCount())
	}
	ready.Stop()
	if err := c.refresh(testCtx(t), true); err != nil || c.ShardCount() != 2 {
		t.Fatalf("refresh with only a starting node up = %v, shard count %d; want the known map kept", err, c.ShardCount())
	}
}

// With no node holding a map (a cluster still placing its shards), Dial
// still succeeds with an empty map, as before.
func TestDialWhileNoNodeHasAShardMap(t *testing.T) {
	s := clienttest.NewServer(t)
	s.SetShardMap(0)
	c := mustDial(t, []string{s.Addr})
	if n := c.ShardCount(); n != 0 {
		t.Fatalf("shard count %d, want 0", n)
	}
}
