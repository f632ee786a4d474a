package shard

import (
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback asks the kernel to begin writing f's dirty pages without
// waiting for them.
func startWriteback(f *os.File) error {
	return unix.SyncFileRange(int(f.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
}
