package shard

import (
	"errors"
	"fmt"
)

var (
	// ErrNotLeader: this replica does not lead the shard; nothing was
	// proposed, so the caller may retry elsewhere (see NotLeaderError).
	ErrNotLeader = errors.New("not leader")
	// ErrUnknownResult: the command was handed to raft but its outcome is
	// not known (leadership lost or transferred mid-flight, shutdown, or the
	// caller's context ended after hand-off). The entry may still commit
	// under a new leader: callers must treat it as indeterminate (retry with
	// a dedup key, or re-read), never as failed.
	ErrUnknownResult = errors.New("result unknown: the command may or may not have been applied")
	// ErrShutdown: the shard is shutting down or shut down.
	ErrShutdown = errors.New("shard shut down")
)

// NotLeaderError carries the leader hint. Fields are empty when the leader
// is unknown (e.g. an election is running).
type NotLeaderError struct {
	LeaderID   string
	LeaderAddr string
}

func (e *NotLeaderError) Error() string {
	if e.LeaderID == "" && e.LeaderAddr == "" {
		return "not leader (leader unknown)"
	}
	return fmt.Sprintf("not leader (leader %s at %s)", e.LeaderID, e.LeaderAddr)
}

// Is makes errors.Is(err, ErrNotLeader) hold.
func (e *NotLeaderError) Is(target error) bool { return target == ErrNotLeader }
