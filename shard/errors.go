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

// ErrDiskFull matches (errors.Is) a *DiskFullError.
var ErrDiskFull = errors.New("disk almost full")

// DiskFullError refuses a send because the leader's node is short of disk
// space: nothing was proposed. It clears once space is freed; receives,
// acks and deletes (which hardly grow the log) go on meanwhile.
type DiskFullError struct {
	Node    string
	Dir     string
	Free    uint64 // bytes free for the node
	Reserve uint64 // sends are refused below this
}

func (e *DiskFullError) Error() string {
	return fmt.Sprintf("node %s: disk almost full (%s free, reserve %s)", e.Node, FormatBytes(e.Free), FormatBytes(e.Reserve))
}

// Is makes errors.Is(err, ErrDiskFull) hold.
func (e *DiskFullError) Is(target error) bool { return target == ErrDiskFull }

// FormatBytes renders n in binary units: "512 MiB", "3.2 GiB", "900 B".
func FormatBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	v := float64(n) / float64(div)
	suffix := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}[exp]
	if v >= 100 || v == float64(int64(v)) {
		return fmt.Sprintf("%.0f %s", v, suffix)
	}
	return fmt.Sprintf("%.1f %s", v, suffix)
}
