package integration

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/internal/testcluster"
)

var nodeBin, cliBin string

func TestMain(m *testing.M) {
	testcluster.Main(m, &nodeBin, func(ctx context.Context, dir string) error {
		cliBin = filepath.Join(dir, "raftq")
		out, err := exec.CommandContext(ctx, "go", "build", "-o", cliBin, "github.com/raftq/raftq/cmd/raftq").CombinedOutput()
		if err != nil {
			return fmt.Errorf("go build cmd/raftq: %w\n%s", err, out)
		}
		return nil
	})
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustDial(t *testing.T, c *testcluster.Cluster, opts ...client.Option) *client.Client {
	t.Helper()
	cl, err := client.Dial(ctxT(t, 30*time.Second), c.Addrs(), opts...)
	if err != nil {
		c.DumpLogs()
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// shardLeaderIndex returns the index of the node leading shard id.
func shardLeaderIndex(t *testing.T, c *testcluster.Cluster, cl *client.Client, id uint32) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		st, err := cl.Status(ctxT(t, 5*time.Second))
		if err == nil {
			for _, s := range st.Shards {
				if s.ID != id || s.LeaderAddr == "" {
					continue
				}
				for i, n := range c.Nodes {
					if n.GRPC == s.LeaderAddr {
						return i
					}
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no leader for shard %d", id)
	return -1
}
