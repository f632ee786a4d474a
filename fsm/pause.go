package fsm

import "github.com/raftq/raftq/fsm/fsmpb"

// A paused queue leases nothing: Receive answers empty (not an error, so
// long polls keep waiting), while Enqueue, Ack, Nack and the rest apply as
// usual and leases already granted run on. The flag is part of the policy
// meta pushes to the shard (QueuePolicy.paused, docs/jobs.md), so it is
// replicated, snapshotted and restored with the queue like any policy
// field, and needs no index of its own.

// paused reports whether q leases nothing now.
func (q *queue) paused() bool { return q.policy.GetPaused() }

// leasable is how many messages a receive could lease now: none while
// paused, else the ready ones up to the in-flight room.
func (q *queue) leasable() uint64 {
	if q.paused() {
		return 0
	}
	return min(uint64(q.ready.Len()), q.leaseRoom())
}

// usesPause reports whether an upsert needs log format 7: a replica of
// format 6 would ignore the flag and lease what its leader refuses, so
// their states would part. A resume (the flag unset) reads alike on both.
func usesPause(u *fsmpb.UpsertQueue) bool { return u.GetPolicy().GetPaused() }

// noteResume wakes the queue's long polls when an upsert lifts its pause:
// its ready messages became leasable without any of them changing state.
func (s *state) noteResume(q *queue, wasPaused bool) {
	if wasPaused && !q.paused() && q.ready.Len() > 0 && s.touched != nil {
		s.touched[q.name] = struct{}{}
	}
}
