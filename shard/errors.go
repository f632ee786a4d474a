package shard

import (
	"errors"
	"fmt"
)

// ErrShutdown: the shard is shutting down or shut down.
var ErrShutdown = errors.New("shard shut down")

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

// ErrMemoryFull matches (errors.Is) a *MemoryFullError.
var ErrMemoryFull = errors.New("memory near its budget")

// MemoryFullError refuses a send because the leader's node holds close to
// its memory budget: nothing was proposed. It clears once consumers drain
// the backlog; receives, acks and deletes go on meanwhile.
type MemoryFullError struct {
	Node   string
	Live   uint64 // live heap
	Budget uint64
}

func (e *MemoryFullError) Error() string {
	return fmt.Sprintf("node %s: memory near its budget (%s live of %s): the backlog must drain before more sends are taken",
		e.Node, FormatBytes(e.Live), FormatBytes(e.Budget))
}

// Is makes errors.Is(err, ErrMemoryFull) hold.
func (e *MemoryFullError) Is(target error) bool { return target == ErrMemoryFull }
