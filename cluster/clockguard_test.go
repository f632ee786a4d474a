package cluster

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/clockskew"
)

// n3's clock steps 10 minutes ahead while the cluster runs, then back: it
// must give up every group it leads, be skipped by hand-offs, stay off
// while skewed, and lead again (its preferred shards return) once its clock
// has been back within the bound for the recovery dwell.
func TestCluster_ClockStepSidelinesNodeUntilItIsBack(t *testing.T) {
	tc := newTestCluster(t)
	tc.define("n1", 3)
	tc.define("n2", 3, "n1")
	tc.define("n3", 3, "n1")
	var off atomic.Int64
	cfg := tc.cfgs["n3"]
	cfg.Now = func() time.Time { return time.Now().Add(time.Duration(off.Load())) }
	tc.cfgs["n3"] = cfg
	for _, id := range []string{"n1", "n2", "n3"} {
		tc.start(id)
	}
	tc.waitReady(60 * time.Second)
	n3 := tc.nodes["n3"]

	leads := func() []string {
		var out []string
		if n3.meta.Raft().State() == raft.Leader {
			out = append(out, "meta")
		}
		for _, s := range n3.LocalShards() {
			if s.Raft().State() == raft.Leader {
				out = append(out, fmt.Sprint("shard-", s.ID()))
			}
		}
		return out
	}
	// 4 shards over 3 nodes: n3 is the preferred replica of some.
	waitFor(t, 60*time.Second, "n3 within the bound and leading its preferred shards", func() error {
		if st := n3.ClockStatus(); st.State != clockskew.Within {
			return fmt.Errorf("n3 clock %v", st.State)
		}
		if l := leads(); !slices.ContainsFunc(l, func(g string) bool { return g != "meta" }) {
			return fmt.Errorf("n3 leads %v", l)
		}
		return nil
	})

	off.Store(int64(10 * time.Minute))
	waitFor(t, 60*time.Second, "n3 judged beyond, leading nothing, every shard led elsewhere", func() error {
		if st := n3.ClockStatus(); st.State != clockskew.Beyond || st.Offset < 9*time.Minute {
			return fmt.Errorf("n3 clock %v offset %v", st.State, st.Offset)
		}
		if l := leads(); len(l) > 0 {
			return fmt.Errorf("n3 still leads %v", l)
		}
		if tc.nodes["n1"].gossip.mayLead("n3") {
			return fmt.Errorf("n1 does not see n3's clock_hold")
		}
		leaders, err := tc.shardLeaders()
		if err != nil {
			return err
		}
		for id, l := range leaders {
			if l == "n3" {
				return fmt.Errorf("shard %d led by n3", id)
			}
		}
		return nil
	})
	waitFor(t, 30*time.Second, "n1 sees n3 10 min ahead and stays within", func() error {
		if st := tc.nodes["n1"].ClockStatus(); st.State != clockskew.Within || st.Peers["n3"].Offset < 9*time.Minute {
			return fmt.Errorf("n1's clock check: %+v", st)
		}
		return nil
	})
	// Hand-offs to n3's preferred shards would be due every second; none
	// may make it leader while it is held.
	elected := total(n3.LeaderElections())
	time.Sleep(3 * time.Second)
	if l, now := leads(), total(n3.LeaderElections()); len(l) > 0 || now != elected {
		t.Fatalf("held n3 leads %v, became leader %d more times", l, now-elected)
	}

	off.Store(0)
	back := time.Now()
	waitFor(t, 90*time.Second, "n3 back within the bound and leading again", func() error {
		if st := n3.ClockStatus(); st.State != clockskew.Within {
			return fmt.Errorf("n3 clock %v offset %v", st.State, st.Offset)
		}
		if !tc.nodes["n1"].gossip.mayLead("n3") {
			return fmt.Errorf("n1 still sees n3's clock_hold")
		}
		if l := leads(); len(l) == 0 {
			return fmt.Errorf("n3 leads nothing yet")
		}
		return nil
	})
	// The recovery dwell (10 s) must have passed: coming back at once
	// would flap with a clock at the bound.
	if d := time.Since(back); d < 10*time.Second {
		t.Fatalf("n3 led again %v after its clock was fixed, before the 10 s dwell", d)
	}
}

func total(m map[string]uint64) uint64 {
	var n uint64
	for _, v := range m {
		n += v
	}
	return n
}
