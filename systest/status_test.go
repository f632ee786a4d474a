package systest

import (
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/internal/testcluster"
)

// Cluster.Status names every member's peer address and the log format meta
// has recorded for it, on every node: what an operator checks during a
// rolling upgrade (docs/deploy.md, "Log formats across an upgrade").
func TestCluster_StatusShowsPeerAddressAndLogFormat(t *testing.T) {
	c := startCluster(t, testcluster.Options{})
	ctx := ctxT(t, 60*time.Second)
	for i := range c.Nodes {
		for {
			st, err := raftqv1.NewClusterClient(c.Conn(i)).Status(ctx, &raftqv1.StatusRequest{})
			done := err == nil && len(st.GetMembers()) == len(c.Nodes)
			for _, m := range st.GetMembers() {
				if m.GetPeerAddr() == "" || m.GetPeerAddr() == m.GetGrpcAddr() || m.GetLogFormat() != fsm.LogFormat {
					done = false
				}
			}
			if done {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("node %d: status never showed every member with a peer address and log format %d: %v %v", i, fsm.LogFormat, st, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}
