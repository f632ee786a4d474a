package raftgroup

import (
	"errors"
	"fmt"
)

var (
	// ErrNotLeader matches (errors.Is) every *NotLeaderError.
	ErrNotLeader = errors.New("not leader")
	// ErrUnknownResult: the command was handed to raft but its outcome is
	// not known (leadership lost or transferred mid-flight, shutdown, or the
	// caller's context ended after hand-off). The entry may still commit
	// under a new leader: callers must treat it as indeterminate (retry with
	// a dedup key, or re-read), never as failed.
	ErrUnknownResult = errors.New("result unknown: the command may or may not have been applied")
)

// NotLeaderError refuses a call that no leader of the group took: this
// replica does not lead (or cannot write), or the node waited for a leader
// to take it and none did in time (Waited). Nothing was proposed, so the
// caller may retry elsewhere. LeaderID and LeaderAddr are the leader as
// the refusing node knows it, empty when unknown; LeaderAddr may be empty
// when only the id is known.
type NotLeaderError struct {
	Group      string // "meta", "shard-3"; empty when not named
	LeaderID   string
	LeaderAddr string
	// Waited: a router waited for the group's leader and gave up, either
	// because none was elected or because the one named was not reachable.
	Waited bool
}

func (e *NotLeaderError) Error() string {
	prefix := ""
	if e.Group != "" {
		prefix = e.Group + ": "
	}
	switch {
	case e.Waited && e.LeaderID != "":
		return fmt.Sprintf("%sleader %s (%s) not reachable in time", prefix, e.LeaderID, e.LeaderAddr)
	case e.Waited:
		return prefix + "no leader elected"
	case e.LeaderID == "":
		return prefix + "not leader (leader unknown)"
	case e.LeaderAddr == "":
		return fmt.Sprintf("%snot leader (leader %s)", prefix, e.LeaderID)
	}
	return fmt.Sprintf("%snot leader (leader %s at %s)", prefix, e.LeaderID, e.LeaderAddr)
}

// Is makes errors.Is(err, ErrNotLeader) hold.
func (e *NotLeaderError) Is(target error) bool { return target == ErrNotLeader }
