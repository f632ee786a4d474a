package raftstore

import (
	"errors"
	"fmt"
	"os"

	"go.etcd.io/bbolt"
)

// ErrInUse says a replica's bolt files are locked by another open: a
// raftq-node running on the data directory, or a `raftq-node verify` of
// it. It is not damage: the files are busy.
var ErrInUse = errors.New("locked by another process (a raftq-node running on this data directory, or raftq-node verify)")

// inUse turns bolt's lock timeout on path into ErrInUse; other errors pass.
func inUse(path string, err error) error {
	if errors.Is(err, bbolt.ErrTimeout) {
		return fmt.Errorf("%s: %w", path, ErrInUse)
	}
	return err
}

// readOnlyBolt opens a bolt file for the checks: shared lock (a running
// node's exclusive lock makes it time out instead of waiting), and never
// O_CREATE, which bbolt passes even for a read-only open and which would
// leave an empty file where a store is missing.
func readOnlyBolt() *bbolt.Options {
	return &bbolt.Options{
		ReadOnly: true,
		Timeout:  boltOpenLimit,
		OpenFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
			return os.OpenFile(name, flag&^os.O_CREATE, perm)
		},
	}
}
