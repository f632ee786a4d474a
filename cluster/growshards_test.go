package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// A growth while a member is down is refused, not placed on the nodes that
// are up: a new shard on fewer replicas than the replication would
// acknowledge sends fewer nodes hold. Once the member is back the same
// growth places every new shard on three replicas.
func TestGrowthWaitsForEnoughNodes(t *testing.T) {
	tc := formThree(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	tc.stop("n3")

	// Until gossip has seen n3 leave, a dry run may still count it.
	waitFor(t, 30*time.Second, "a dry run refused for too few nodes", func() error {
		l, ok := tc.metaLeader()
		if !ok {
			return errors.New("no meta leader")
		}
		_, err := l.SetShardCount(ctx, 2, true)
		if errors.Is(err, ErrTooFewNodes) {
			return nil
		}
		return fmt.Errorf("dry run: %v", err)
	})
	l, ok := tc.metaLeader()
	if !ok {
		t.Fatal("no meta leader")
	}
	if _, err := l.SetShardCount(ctx, 2, false); !errors.Is(err, ErrTooFewNodes) {
		t.Fatalf("growth with n3 down: %v; want ErrTooFewNodes", err)
	} else {
		t.Logf("refused: %v", err)
	}
	if c := l.ShardMap().Count; c != 1 {
		t.Fatalf("a refused growth changed the shard count to %d", c)
	}

	tc.start("n3")
	var st GrowStatus
	waitFor(t, 60*time.Second, "the growth placed once n3 is back", func() error {
		l, ok := tc.metaLeader()
		if !ok {
			return errors.New("no meta leader")
		}
		var err error
		st, err = l.SetShardCount(ctx, 2, false)
		return err
	})
	if reps := st.NewShards[1]; len(reps) != 3 {
		t.Fatalf("new shard 1 placed on %v; want three replicas", reps)
	}
}
