package cluster

import (
	"time"

	"github.com/raftq/raftq/raftgroup"
)

// shardCommitTimeout is the shards' raft CommitTimeout unless the node's
// tuning sets one. raft's leader sends every follower an AppendEntries each
// CommitTimeout to 2 × CommitTimeout so that followers learn the commit
// index after writes stop; it does not delay writes (a new entry is
// replicated at once, and its commit index rides on the next one). At the
// 50 ms default it was half of an idle shard's cost (docs/benchmarks.md,
// "Idle cost of shards"); at 1 s a follower applies the last entries of a
// burst up to 2 s after the leader. The meta group keeps 50 ms: its
// followers answer reads once they applied what they know is committed
// (meta/current.go).
const shardCommitTimeout = time.Second

// shardTuning is the raft tuning of this node's shards: the node's, with
// idle shards quieted by the node's Quiescer (raftgroup/quiet.go).
func (n *Node) shardTuning() raftgroup.RaftTuning {
	t := n.cfg.Raft
	if t.CommitTimeout <= 0 {
		t.CommitTimeout = shardCommitTimeout
	}
	if t.Quiet == nil {
		t.Quiet = n.quiet
	}
	return t
}
