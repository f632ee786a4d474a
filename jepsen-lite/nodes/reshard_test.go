package nodes

import (
	"context"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/jepsen-lite/netns"
)

// statusSvc reports shards shards, each on n1..n3 led by n1.
type statusSvc struct {
	raftqv1.UnimplementedClusterServer
	shards int
}

func (s *statusSvc) Status(context.Context, *raftqv1.StatusRequest) (*raftqv1.StatusResponse, error) {
	st := &raftqv1.StatusResponse{}
	for i := range s.shards {
		st.Shards = append(st.Shards, &raftqv1.ShardInfo{ShardId: uint32(i), LeaderId: "n1", Replicas: []string{"n1", "n2", "n3"}})
	}
	return st, nil
}

// A cluster whose shard count grew past --shards is healthy once every
// member knows the same count; fewer than the start's, or members that
// disagree (one has not applied the growth yet), are not.
func TestAgreeWithAGrownShardCount(t *testing.T) {
	nw := &netns.Net{}
	for i := range 3 {
		nw.Nodes = append(nw.Nodes, netns.NS{Name: "ns" + string(rune('1'+i)), IP: "10.99.1." + string(rune('1'+i))})
	}
	c, err := New("/bin/false", t.TempDir(), nw, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer c.KillAll(t.Context())
	svcs := make([]*statusSvc, 3)
	for i := range svcs {
		svcs[i] = &statusSvc{}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer()
		raftqv1.RegisterClusterServer(srv, svcs[i])
		go func() { _ = srv.Serve(lis) }()
		defer srv.Stop()
		_ = c.conns[i].Close()
		if c.conns[i], err = grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		shards []int
		err    string
	}{
		{[]int{2, 2, 2}, ""},
		{[]int{4, 4, 4}, ""},
		{[]int{4, 3, 4}, "n2 knows 3 shards, n1 4"},
		{[]int{1, 1, 1}, "knows 1 shards of 2"},
	} {
		for i, k := range tc.shards {
			svcs[i].shards = k
		}
		err := c.agree(t.Context())
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("shards %v: %v, want %q", tc.shards, err, tc.err)
		}
	}
}
