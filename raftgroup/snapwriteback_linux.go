package raftgroup

import (
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback asks the kernel to begin writing f's dirty pages in
// [off, off+n) without waiting for them.
func startWriteback(f *os.File, off, n int64) error {
	return unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}
