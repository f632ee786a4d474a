// Package systest runs end-to-end tests against real raftq-node processes
// on loopback: real TCP, real bolt files, real signals.
package systest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/raftq/raftq/internal/testcluster"
)

var nodeBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "raftq-systest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	nodeBin, err = testcluster.Build(ctx, dir)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}
