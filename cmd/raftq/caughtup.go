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

// awaitCaughtUp is cluster status --caught-up: it waits until the node at
// addr (the first --addr) has applied, on every shard it replicates, the
// commit index that shard's leader showed in its own status when first
// asked. Each leader is asked once per shard: under load the commit index
// keeps moving, and "applied what was committed when it came back" is
// what tells that the node replays no backlog. Only the node at addr
// counts, never another that answers in its place. It returns the node's
// last status (nil if it never answered) and, past deadline, what still
// lags.
func awaitCaughtUp(ctx context.Context, c *client.Client, addr string, deadline time.Time) (*client.ClusterStatus, error) {
	var st *client.ClusterStatus
	marks := map[uint32]uint64{}
	for {
		var lag []string
		cur, err := c.StatusAt(ctx, addr)
		if err != nil {
			lag = []string{err.Error()}
		} else {
			st = cur
			for _, s := range st.Shards {
				if _, ok := marks[s.ID]; ok || !slices.Contains(s.Replicas, st.NodeID) {
					continue
				}
				if s.LeaderID == st.NodeID {
					marks[s.ID] = s.CommitIndex
				} else if m, ok := leaderCommit(ctx, c, s); ok {
					marks[s.ID] = m
				}
			}
			lag = lagging(st, marks)
		}
		if len(lag) == 0 {
			return st, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return st, fmt.Errorf("%w: %s: %s", errNotCaughtUp, addr, strings.Join(lag, "; "))
		}
		t := time.NewTimer(statusPoll)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
}

// leaderCommit asks shard s's leader, at the address the node names for
// it, for the shard's commit index in its own status.
func leaderCommit(ctx context.Context, c *client.Client, s client.ShardInfo) (uint64, bool) {
	if s.LeaderID == "" || s.LeaderAddr == "" {
		return 0, false
	}
	st, err := c.StatusAt(ctx, s.LeaderAddr)
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

// lagging says, shard by shard, what the node that answered st has not
// applied yet: its applied index against marks, the leaders' commit
// indexes.
func lagging(st *client.ClusterStatus, marks map[uint32]uint64) []string {
	var out []string
	for _, s := range st.Shards {
		if !slices.Contains(s.Replicas, st.NodeID) {
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
