package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/raftgroup"
)

// A meta group left with two voters (a drain that found no live nonvoter to
// promote, or a replacement that voted already) gets its third back from
// a live nonvoter.
func TestMetaVotersToppedUp(t *testing.T) {
	tc := formThree(t)
	joinFourth(t, tc)
	if s := serverSuffrage(t, tc.nodes["n1"], "n4"); s != raft.Nonvoter {
		t.Fatalf("n4 joined as %v; want a nonvoter", s)
	}
	tc.stop("n3")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitFor(t, 30*time.Second, "n3 out of the meta configuration", func() error {
		l, ok := tc.metaLeader()
		if !ok {
			return errors.New("no meta leader")
		}
		r := l.Meta().Raft()
		f := r.GetConfiguration()
		if err := f.Error(); err != nil {
			return err
		}
		return raftgroup.WaitFuture(ctx, r.RemoveServer("n3", f.Index(), 5*time.Second), nil)
	})
	waitFor(t, 30*time.Second, "three meta voters again", func() error {
		l, ok := tc.metaLeader()
		if !ok {
			return errors.New("no meta leader")
		}
		f := l.Meta().Raft().GetConfiguration()
		if err := f.Error(); err != nil {
			return err
		}
		var voters []raft.ServerID
		for _, s := range f.Configuration().Servers {
			if s.Suffrage == raft.Voter {
				voters = append(voters, s.ID)
			}
		}
		if len(voters) != 3 {
			return fmt.Errorf("voters %v", voters)
		}
		return nil
	})
	if s := serverSuffrage(t, tc.nodes["n1"], "n4"); s != raft.Voter {
		t.Fatalf("n4 is %v; want it promoted", s)
	}
}
