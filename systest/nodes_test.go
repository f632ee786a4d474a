package systest

import (
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/internal/testcluster"
)

// `raftq cluster nodes --json` names every node with its addresses, state,
// meta role, version and log format, the shards placed on it, and every
// shard's leader once.
func TestCluster_NodesListsEveryNode(t *testing.T) {
	c := startCluster(t, testcluster.Options{Shards: 2})
	ctx := ctxT(t, 60*time.Second)
	var ns []client.NodeInfo
	var last string
	for {
		out, err := exec.CommandContext(ctx, cliBin, "--addr", c.Nodes[0].GRPC, "--json", "cluster", "nodes").CombinedOutput()
		last = string(out)
		ns = nil
		if err == nil && json.Unmarshal(out, &ns) == nil && nodesSettled(ns, len(c.Nodes), 2) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("cluster nodes never listed every node settled: %v\n%s", err, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for i, n := range ns {
		want := c.Nodes[i]
		if n.NodeID != want.ID || n.GRPCAddr != want.GRPC || n.PeerAddr != want.Peer || n.RaftAddr != want.Raft {
			t.Errorf("node %d: got %+v, want id %s grpc %s peer %s raft %s", i, n, want.ID, want.GRPC, want.Peer, want.Raft)
		}
		if n.State != "alive" || n.Meta != "voter" || n.LogFormat != fsm.LogFormat || !strings.HasPrefix(n.Version, "github.com/raftq/raftq@") {
			t.Errorf("node %s: state %q meta %q format %d version %q", n.NodeID, n.State, n.Meta, n.LogFormat, n.Version)
		}
		if !slices.Equal(n.Replicas, []uint32{0, 1}) {
			t.Errorf("node %s: replicas %v, want [0 1] (3 nodes, replication 3)", n.NodeID, n.Replicas)
		}
	}
	out, err := exec.CommandContext(ctx, cliBin, "--addr", c.Nodes[1].GRPC, "cluster", "nodes").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "REPLICAS") || !strings.Contains(string(out), c.Nodes[2].Peer) {
		t.Fatalf("cluster nodes table: %v\n%s", err, out)
	}
}

// nodesSettled: nodes entries, every shard led by exactly one of them.
func nodesSettled(ns []client.NodeInfo, nodes, shards int) bool {
	if len(ns) != nodes {
		return false
	}
	led := map[uint32]int{}
	for _, n := range ns {
		if n.State != "alive" || n.LogFormat == 0 {
			return false
		}
		for _, s := range n.Leaders {
			led[s]++
		}
	}
	for s := uint32(0); s < uint32(shards); s++ {
		if led[s] != 1 {
			return false
		}
	}
	return true
}
