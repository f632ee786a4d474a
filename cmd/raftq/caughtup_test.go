package main

import (
	"net"
	"reflect"
	"strings"
	"testing"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/client/clienttest"
)

// lagging names each shard of the node that has not applied its leader's
// commit index, or whose leader's index is not known yet, and ignores
// shards the node does not replicate.
func TestLaggingNamesEachShardBehind(t *testing.T) {
	st := &client.ClusterStatus{NodeID: "n2", Shards: []client.ShardInfo{
		{ID: 0, Replicas: []string{"n1", "n2", "n3"}, LeaderID: "n1", AppliedIndex: 90},
		{ID: 1, Replicas: []string{"n1", "n2", "n3"}, LeaderID: "n3", AppliedIndex: 200},
		{ID: 2, Replicas: []string{"n1", "n2", "n3"}, LeaderID: "n3", AppliedIndex: 5},
		{ID: 3, Replicas: []string{"n1", "n3", "n4"}, LeaderID: "n1", AppliedIndex: 0},
	}}
	marks := map[uint32]uint64{0: 100, 1: 200, 3: 50}
	want := []string{
		"shard 0 applied 90 of the 100 committed on its leader n1",
		"shard 2: no commit index from its leader n3 yet",
	}
	if got := lagging(st, marks); !reflect.DeepEqual(got, want) {
		t.Fatalf("lagging = %q, want %q", got, want)
	}
	marks[0], marks[2] = 90, 5
	if got := lagging(st, marks); len(got) != 0 {
		t.Fatalf("caught-up node lagging %q", got)
	}
}

// --caught-up judges the node at the first --addr only: when it does not
// answer, another node's view does not pass for it (exit 3, naming the
// address), although plain status is served by the next seed.
func TestCaughtUpNeedsTheFirstAddrItself(t *testing.T) {
	s := clienttest.NewServer(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	_ = lis.Close()
	addrs := dead + "," + s.Addr
	if r := raftq(t, addrs, "", "--timeout", "3s", "cluster", "status"); r.code != exitOK {
		t.Fatalf("status through the second seed: exit %d, stderr %q", r.code, r.stderr)
	}
	r := raftq(t, addrs, "", "--timeout", "3s", "cluster", "status", "--caught-up")
	if r.code != exitUnavailable || !strings.Contains(r.stderr, "node not caught up: "+dead) {
		t.Fatalf("caught-up of a node that does not answer: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := raftq(t, s.Addr, "", "cluster", "status", "--caught-up"); r.code != exitOK || !strings.Contains(r.stdout, "SHARD") {
		t.Fatalf("caught-up of a node with no replica: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}
