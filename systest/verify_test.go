package systest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/internal/testcluster"
)

// runVerifyBin runs `raftq-node verify --data-dir dir` and returns its
// exit status and output.
func runVerifyBin(t *testing.T, dir string) (int, string) {
	t.Helper()
	ctx := ctxT(t, 2*time.Minute)
	cmd := exec.CommandContext(ctx, nodeBin, "verify", "--data-dir", dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), out.String()
	}
	t.Fatalf("run verify: %v\n%s", err, out.String())
	return 0, ""
}

// The offline check on the data directory of a real node: it refuses
// while the node runs, finds every replica intact after a clean stop,
// and names a store deleted afterwards.
func TestVerifyNodeDataDir(t *testing.T) {
	c := startCluster(t, testcluster.Options{Nodes: 1, Shards: 2})
	mustCreateQueue(t, c, "jobs", nil)
	ctx := ctxT(t, 30*time.Second)
	for i := range 50 {
		if _, err := msgs(c, 0).Send(ctx, &raftqv1.SendRequest{Queue: "jobs", Body: fmt.Appendf(nil, "m%d", i)}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	dir := c.Nodes[0].Dir
	if code, out := runVerifyBin(t, dir); code != 2 || !strings.Contains(out, "the node is running; stop it first") {
		t.Fatalf("verify of a running node: exit %d\n%s", code, out)
	}
	if err := c.Stop(0, time.Minute); err != nil {
		t.Fatalf("stop: %v", err)
	}
	code, out := runVerifyBin(t, dir)
	if code != 0 {
		t.Fatalf("verify after a clean stop: exit %d\n%s", code, out)
	}
	for _, want := range []string{"node n1,", "\nmeta: OK: log 1-", "\nshard-0: OK: log 1-", "\nshard-1: OK: log 1-", "all 3 replicas intact"} {
		if !strings.Contains(out, want) {
			t.Fatalf("verify output lacks %q:\n%s", want, out)
		}
	}
	t.Logf("raftq-node verify:\n%s", out)

	stable := filepath.Join(dir, "shards", "1", "raft.db")
	if err := os.Remove(stable); err != nil {
		t.Fatal(err)
	}
	code, out = runVerifyBin(t, dir)
	if code != 1 || !strings.Contains(out, "\nshard-1: DAMAGED store-missing: ") || !strings.Contains(out, "file "+stable) ||
		!strings.Contains(out, "raftq cluster repair n1") || !strings.Contains(out, "\nshard-0: OK") {
		t.Fatalf("verify with shard 1's raft.db deleted: exit %d\n%s", code, out)
	}
}
