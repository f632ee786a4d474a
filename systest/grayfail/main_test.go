// Package grayfail runs real raftq-node processes in private network
// namespaces (jepsen-lite/netns) and injects gray failures: faults that
// leave a node up and answering some peers but not others. The tests
// measure what a client sees: how long acknowledged sends stop, and that
// nothing acknowledged is lost.
package grayfail

import (
	"testing"

	"github.com/raftq/raftq/internal/testcluster"
)

var nodeBin string

func TestMain(m *testing.M) { testcluster.Main(m, &nodeBin) }
