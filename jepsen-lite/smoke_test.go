package main

import (
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/raftq/raftq/jepsen-lite/nemesis"
	"github.com/raftq/raftq/jepsen-lite/workload"
)

// faultWork is what a round of faults takes to apply and undo beyond
// their holds, as measured on the 2-core dev machine (docs/jepsen.md): a
// rolling restart 3-17 s, a lost disk's repair up to 10 s past its hold,
// a node replaced (joined, 4 replicas moved, retired) 25-35 s; plus
// 25 s for a growth of the shard count (the new shard placed and
// serving, up to 12 s until the disruption, 2-4 slot moves stepped every
// 500 ms), estimated: it was written before the server could grow.
const faultWork = 90 * time.Second

// make jepsen-smoke runs long enough for every fault kind to fire: its
// JEPSEN_TIME is at least the schedule's worst case for one round of
// every kind, with the workloads' longest lease, plus faultWork.
func TestSmokeTimeCoversEveryKind(t *testing.T) {
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^JEPSEN_TIME \?= (\S+)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("no JEPSEN_TIME in the Makefile")
	}
	smoke, err := time.ParseDuration(string(m[1]))
	if err != nil {
		t.Fatal(err)
	}
	var vis time.Duration
	for _, name := range workload.Names() {
		w, err := workload.ByName(name)
		if err != nil {
			t.Fatal(err)
		}
		vis = max(vis, w.Visibility)
	}
	n, err := nemesis.New(nil, nil, nil, nemesis.Kinds, vis, 1)
	if err != nil {
		t.Fatal(err)
	}
	if need := n.CoverWithin() + faultWork; smoke < need {
		t.Fatalf("JEPSEN_TIME %v: every kind may need %v (schedule %v + fault work %v)", smoke, need, n.CoverWithin(), faultWork)
	}
}
