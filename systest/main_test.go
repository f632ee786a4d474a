// Package systest runs end-to-end tests against real raftq-node processes
// on loopback: real TCP, real raft logs on disk, real signals.
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
