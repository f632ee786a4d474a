package meta

import (
	"context"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/raftgroup"
)

// Current reports whether this replica's state can be trusted as up to date
// for decisions that destroy data (a shard deleting a queue that meta no
// longer lists, or rolling a policy back). It holds for the meta leader that
// still confirms its leadership with a quorum, and for a follower that heard
// from a leader within maxLag and has applied everything it knows to be
// committed.
//
// Why: raft restores only the last snapshot on restart and applies later
// entries once a leader tells it the commit index, so a restarted or
// partitioned replica can hold an empty or old queue list for a long time.
// Acting on it would delete acknowledged messages.
func (s *Store) Current(ctx context.Context, maxLag time.Duration) bool {
	if s.raft.State() == raft.Leader {
		vctx, cancel := context.WithTimeout(ctx, maxLag)
		defer cancel()
		if err := raftgroup.WaitFuture(vctx, s.raft.VerifyLeader(), nil); err != nil {
			return false
		}
		return s.raft.AppliedIndex() >= s.raft.CommitIndex()
	}
	if s.LeaderID() == "" {
		return false
	}
	last := s.raft.LastContact()
	if last.IsZero() || time.Since(last) > maxLag {
		return false
	}
	commit := s.raft.CommitIndex()
	return commit > 0 && s.raft.AppliedIndex() >= commit
}
