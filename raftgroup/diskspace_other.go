//go:build !unix

package raftgroup

import "errors"

// DiskSpace is not implemented here: disk-space guards stay off.
func DiskSpace(string) (free, total uint64, err error) {
	return 0, 0, errors.New("disk space: not supported on this platform")
}
