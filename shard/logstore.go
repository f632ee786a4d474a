package shard

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	"github.com/raftq/raftq/raftmux"
	"go.etcd.io/bbolt"
)

// Log store kinds (RaftTuning.LogStore, raftq-node --log-store).
const (
	// LogStoreWAL keeps the raft log in raft-wal segment files under
	// <dir>/wal: one write and one fdatasync per append, and truncation
	// by deleting whole segments. It is the default for new groups: per
	// raft round it takes half the time of bolt or less and a third to a
	// sixth of its CPU (BenchmarkLogStoreAppend; docs/benchmarks.md, "The
	// log in segment files").
	LogStoreWAL = "wal"
	// LogStoreBolt keeps the raft log in <dir>/raft.db (raft-boltdb): a
	// copy-on-write B-tree with two fdatasyncs per commit.
	LogStoreBolt = "bolt"
)

const walDirName = "wal"

// stores is one raft group's persistent state: the log, the stable store
// (current term and vote, always raft-boltdb in raft.db) and what closes them.
type stores struct {
	kind   string
	logs   raft.LogStore
	stable raft.StableStore
	bolt   *raftboltdb.BoltStore
	wal    *reopenWAL // nil unless kind is LogStoreWAL
}

// openStores opens the stores of the group in dir. A group keeps the log
// store it was created with: switching would orphan its log, so want only
// chooses for a directory that has none yet, and a mismatch is logged.
func openStores(dir, want string, segmentBytes int, logger *slog.Logger) (*stores, error) {
	if want == "" {
		want = LogStoreWAL
	}
	if want != LogStoreWAL && want != LogStoreBolt {
		return nil, fmt.Errorf("log store %q: want %q or %q", want, LogStoreWAL, LogStoreBolt)
	}
	kind, err := existingLogStore(dir)
	if err != nil {
		return nil, err
	}
	switch {
	case kind == "":
		kind = want
	case kind != want:
		logger.Warn("raft group keeps the log store it was created with", "dir", dir, "log_store", kind, "asked", want)
	}
	st := &stores{kind: kind}
	walDir := filepath.Join(dir, walDirName)
	if kind == LogStoreWAL {
		// wal/ exists before raft.db does, so a directory with raft.db
		// and no wal/ is always a bolt group.
		if err := os.MkdirAll(walDir, 0o755); err != nil {
			return nil, fmt.Errorf("create raft log dir: %w", err)
		}
	}
	// raft.db first: its open times out when another process holds the
	// directory, where raft-wal's meta store would wait forever.
	st.bolt, err = raftboltdb.New(raftboltdb.Options{
		Path: filepath.Join(dir, "raft.db"),
		// NoFreelistSync + map freelist: the freelist is rebuilt at open
		// instead of rewritten on every commit (consul#5181); fsync of the
		// data itself stays on (NoSync false) — durability before ack.
		BoltOptions: &bbolt.Options{
			Timeout:        time.Second,
			NoFreelistSync: true,
			FreelistType:   bbolt.FreelistMapType,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("open raft.db in %s: %w", dir, err)
	}
	if kind == LogStoreWAL {
		if segmentBytes <= 0 {
			segmentBytes = wal.DefaultSegmentSize
		}
		st.wal, err = openReopenWAL(walDir, logger, func() (*wal.WAL, error) {
			return wal.Open(walDir, wal.WithLogger(raftmux.HCLogger(logger, "raft-wal")), wal.WithSegmentSize(segmentBytes))
		})
		if err != nil {
			_ = st.bolt.Close()
			return nil, fmt.Errorf("open raft log in %s: %w", walDir, err)
		}
	}
	st.stable, st.logs = st.bolt, st.bolt
	if st.wal != nil {
		st.logs = st.wal
	}
	return st, nil
}

// existingLogStore names the log store a group directory was created with,
// or "" for a directory without raft state.
func existingLogStore(dir string) (string, error) {
	for _, c := range []struct{ name, kind string }{{walDirName, LogStoreWAL}, {"raft.db", LogStoreBolt}} {
		_, err := os.Stat(filepath.Join(dir, c.name))
		switch {
		case err == nil:
			return c.kind, nil
		case !errors.Is(err, os.ErrNotExist):
			return "", fmt.Errorf("look for raft state in %s: %w", dir, err)
		}
	}
	return "", nil
}

// Close closes the log store, then the stable store.
func (s *stores) Close() error {
	var errs []error
	if s.wal != nil {
		if err := s.wal.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close raft wal: %w", err))
		}
	}
	if err := s.bolt.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close raft.db: %w", err))
	}
	return errors.Join(errs...)
}

var _ io.Closer = (*stores)(nil)
