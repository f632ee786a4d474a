// Package systest runs end-to-end tests against real raftq-node processes
// on loopback: real TCP, real raft logs on disk, real signals.
//
// The membership tests (replica moves, rebalancing, dead nodes, backup,
// rolling restarts) call t.Parallel: each runs its own cluster on its own
// ports and directories and spends most of its time waiting out grace
// periods and stability windows, so two of them (go test's default
// -parallel on 2 cores) share the machine without starving each other and
// the package's wall time stays well inside CI's budget. Tests that
// measure timing or inject disk faults stay sequential.
package systest

import (
	"context"
	"testing"

	"github.com/raftq/raftq/internal/testcluster"
)

var (
	nodeBin string
	// cliBin is the operator CLI (cmd/raftq), for tests that act as an
	// operator would.
	cliBin string
)

func TestMain(m *testing.M) {
	testcluster.Main(m, &nodeBin, func(ctx context.Context, dir string) (err error) {
		cliBin, err = testcluster.BuildCLI(ctx, dir)
		return err
	})
}
