// Package systest runs end-to-end tests against real raftq-node processes
// on loopback: real TCP, real raft logs on disk, real signals.
package systest

import (
	"testing"

	"github.com/raftq/raftq/internal/testcluster"
)

var nodeBin string

func TestMain(m *testing.M) { testcluster.Main(m, &nodeBin) }
