package raftstore

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coreos/etcd/pkg/fileutil"
	"github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/types"
)

// firstReserve is how much of a new log segment is allocated before its
// first write. raft-wal allocates a whole segment (64 MiB by default) as
// it creates it, so every idle raft group held a full segment per replica:
// 128 idle shards took 8.5 GB per node. Here a segment's blocks are
// allocated as its writes reach them, doubling each time, so a group
// holds about twice what it wrote and a busy one reaches the full segment
// after a handful of fallocate calls.
const firstReserve = 1 << 20

// growFS is raft-wal's file system (fs.FS) with segment allocation that
// follows the writes. A segment file still has its full length from the
// start (the length check of checkSegments holds, and reading past the
// written tail sees zeros, as raft-wal's recovery expects); only the
// allocation grows. The allocation happens before the bytes are written,
// so a full disk fails the append before any of it reaches the file, as
// it failed the segment's creation before.
type growFS struct {
	*fs.FS
	first int64
	syncs *SyncTimes // may be nil
}

func newGrowFS(syncs *SyncTimes) growFS {
	return growFS{FS: fs.New(), first: firstReserve, syncs: syncs}
}

// Create creates a segment file of length size, allocating its first part.
func (g growFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	if size > math.MaxInt32 {
		return nil, fmt.Errorf("segment %s: size %d above the maximum %d", name, size, math.MaxInt32)
	}
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	gf := &growFile{File: f, dir: dir, limit: int64(size), first: g.first, syncs: g.syncs}
	if size > 0 {
		if err := f.Truncate(int64(size)); err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("segment %s: set length: %w", name, err)
		}
		if err := gf.reserve(min(g.first, int64(size))); err != nil {
			_ = f.Close()
			return nil, err
		}
	}
	// Like raft-wal's fs.File, the directory is synced with the file's
	// first Sync (dirSynced starts false), before any entry in it is
	// acknowledged.
	return gf, nil
}

// OpenWriter opens the tail segment again (after a restart); allocation
// resumes from its first write.
func (g growFS) OpenWriter(dir, name string) (types.WritableFile, error) {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	gf := &growFile{File: f, dir: dir, limit: fi.Size(), first: g.first, syncs: g.syncs}
	gf.dirSynced.Store(true)
	return gf, nil
}

// growFile is a segment file whose allocation grows ahead of its writes.
type growFile struct {
	*os.File
	dir   string
	limit int64 // the segment's length
	first int64
	syncs *SyncTimes

	mu        sync.Mutex
	reserved  int64 // allocated from offset 0 (as far as we know)
	dirSynced atomic.Bool
}

// WriteAt allocates up to the end of the write first.
func (f *growFile) WriteAt(p []byte, off int64) (int, error) {
	end := off + int64(len(p))
	f.mu.Lock()
	if end > f.reserved {
		want := max(end, 2*f.reserved, f.first)
		if f.limit > 0 && want > f.limit {
			want = max(f.limit, end)
		}
		if err := f.reserve(want); err != nil {
			f.mu.Unlock()
			return 0, err
		}
	}
	f.mu.Unlock()
	return f.File.WriteAt(p, off)
}

// reserve allocates [0, n) without changing the file's length.
// Filesystems without fallocate allocate as the writes land, as raft-wal
// does on them.
func (f *growFile) reserve(n int64) error {
	if err := fileutil.Preallocate(f.File, n, false); err != nil {
		return fmt.Errorf("allocate %d bytes of %s: %w", n, f.Name(), err)
	}
	f.reserved = n
	return nil
}

// Sync syncs the file and, the first time after Create, its directory.
func (f *growFile) Sync() error {
	start := time.Now()
	err := f.File.Sync()
	f.syncs.Observe(time.Since(start))
	if err != nil {
		return err
	}
	if f.dirSynced.Swap(true) {
		return nil
	}
	d, err := os.Open(f.dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

var _ types.VFS = growFS{}
