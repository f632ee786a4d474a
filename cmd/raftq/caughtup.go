package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/raftq/raftq/client"
)

// errNotCaughtUp marks a node that has not yet applied what its shards'
// leaders had committed: exit 3, like a cluster without leaders, so a
// rolling restart script waits on the exit status.
var errNotCaughtUp = fmt.Errorf("%w: node not caught up", errNotReady)

// awaitCaughtUp is cluster status --caught-up: it waits until the node
// that answered st (the first --addr that answers) has applied, on every
// shard it replicates, the commit index that shard's leader showed in its
// own status when first asked. Each leader is asked once per shard: under
// load the commit index keeps moving, and "applied what was committed
// when it came back" is what tells that the node replays no backlog. It
// returns the node's last status and, past deadline, what still lags.
func awaitCaughtUp(ctx context.Context, c *client.Client, st *client.ClusterStatus, deadline time.Time) (*client.ClusterStatus, error) {
	node := st.NodeID
	marks := map[uint32]uint64{}
	for {
		for _, s := range st.Shards {
			if _, ok := marks[s.ID]; ok || st.NodeID != node || !slices.Contains(s.Replicas, node) {
				continue
			}
			if s.LeaderID == node {
				marks[s.ID] = s.CommitIndex
			} else if m, ok := leaderCommit(ctx, s); ok {
				marks[s.ID] = m
			}
		}
		lag := lagging(node, st, marks)
		if len(lag) == 0 {
			return st, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return st, fmt.Errorf("%w: %s: %s", errNotCaughtUp, node, strings.Join(lag, "; "))
		}
		t := time.NewTimer(statusPoll)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		if next, err := c.Status(ctx); err == nil {
			st = next
		}
	}
}

// leaderCommit asks shard s's leader, at the address the answering node
// names for it, for the shard's commit index in its own status.
func leaderCommit(ctx context.Context, s client.ShardInfo) (uint64, bool) {
	if s.LeaderID == "" || s.LeaderAddr == "" {
		return 0, false
	}
	lc, err := client.Dial(ctx, []string{s.LeaderAddr})
	if err != nil {
		return 0, false
	}
	defer func() { _ = lc.Close() }()
	st, err := lc.Status(ctx)
	// Status falls back to another node when the leader does not answer;
	// only the leader's own replica knows the commit index.
	if err != nil || st.NodeID != s.LeaderID {
		return 0, false
	}
	for _, ls := range st.Shards {
		if ls.ID == s.ID && ls.LeaderID == s.LeaderID && ls.CommitIndex > 0 {
			return ls.CommitIndex, true
		}
	}
	return 0, false
}

// lagging says, shard by shard, what node has not applied yet: its
// applied index in st against marks, the leaders' commit indexes.
func lagging(node string, st *client.ClusterStatus, marks map[uint32]uint64) []string {
	if st.NodeID != node {
		return []string{fmt.Sprintf("%s did not answer (%s did)", node, st.NodeID)}
	}
	var out []string
	for _, s := range st.Shards {
		if !slices.Contains(s.Replicas, node) {
			continue
		}
		mark, ok := marks[s.ID]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("shard %d: no commit index from its leader %s yet", s.ID, dash(s.LeaderID)))
		case s.AppliedIndex < mark:
			out = append(out, fmt.Sprintf("shard %d applied %d of the %d committed on its leader %s", s.ID, s.AppliedIndex, mark, s.LeaderID))
		}
	}
	return out
}
