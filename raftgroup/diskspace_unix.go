//go:build unix

package raftgroup

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// DiskSpace reports the space of the filesystem holding dir: free is what
// an unprivileged process may still use (blocks reserved for root are not
// counted, so a node running as root has that reserve beyond it), total
// the filesystem's size.
func DiskSpace(dir string) (free, total uint64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	bs := uint64(st.Bsize) // int64 on linux, uint32 on darwin
	return uint64(st.Bavail) * bs, uint64(st.Blocks) * bs, nil
}
