package raftstore

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Private takes group and other permissions off everything under dir. A
// data directory holds message bodies (raft logs, snapshots), so only the
// node's user may read it: raftq-node creates its files 0600 and its
// directories 0700 (and runs with umask 077 for what its libraries
// create), and this tightens what an older raftq, or a copy restored by
// hand, left readable. It returns how many entries it changed; symlinks
// are left alone (their target's mode is the target's business).
func Private(dir string) (changed int, err error) {
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		mode := info.Mode().Perm()
		if mode&0o077 == 0 {
			return nil
		}
		if err := os.Chmod(path, mode&^0o077); err != nil {
			return err
		}
		changed++
		return nil
	})
	if err != nil {
		return changed, fmt.Errorf("make %s private: %w", dir, err)
	}
	return changed, nil
}
