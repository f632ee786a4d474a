package raftstore

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
	"github.com/hashicorp/raft-wal/segment"
	"github.com/raftq/raftq/raftmux"
	"go.etcd.io/bbolt"
)

// Log store kinds (replica.json's log_store, raftq-node --log-store).
const (
	// LogStoreWAL keeps the raft log in raft-wal segment files under
	// <dir>/wal: one write and one fdatasync per append, and truncation
	// by deleting whole segments. It is the default for new groups: per
	// raft round it takes less time and CPU than bolt
	// (BenchmarkLogStoreAppend; docs/benchmarks.md, "Component
	// benchmarks").
	LogStoreWAL = "wal"
	// LogStoreBolt keeps the raft log in <dir>/raft.db (raft-boltdb): a
	// copy-on-write B-tree with two fdatasyncs per commit.
	LogStoreBolt = "bolt"
)

const (
	walDirName    = "wal"
	walMetaName   = "wal-meta.db"
	boltFileName  = "raft.db"
	boltOpenLimit = time.Second
)

// stores is one raft group's persistent state: the log, the stable store
// (current term and vote, always raft-boltdb in raft.db) and what closes them.
type stores struct {
	kind   string
	logs   raft.LogStore
	stable raft.StableStore
	bolt   *raftboltdb.BoltStore
	wal    *reopenWAL // nil unless kind is LogStoreWAL
}

func validKind(kind string) error {
	if kind != LogStoreWAL && kind != LogStoreBolt {
		return fmt.Errorf("log store %q: want %q or %q", kind, LogStoreWAL, LogStoreBolt)
	}
	return nil
}

// openStores opens the stores of the group in dir with the log store kind
// its identity records; a group never changes kind (switching would orphan
// its log), and a missing store is never recreated here: the caller has
// checked they exist, or is creating the group.
//
// syncs, if not nil, times the fsyncs of the log segments.
func openStores(dir, kind string, segmentBytes int, logger *slog.Logger, syncs *SyncTimes) (*stores, error) {
	if err := validKind(kind); err != nil {
		return nil, err
	}
	st := &stores{kind: kind}
	walDir := filepath.Join(dir, walDirName)
	if kind == LogStoreWAL {
		if err := os.MkdirAll(walDir, 0o700); err != nil {
			return nil, fmt.Errorf("create raft log dir: %w", err)
		}
	}
	var err error
	// raft.db first: its open times out when another process holds the
	// directory, where raft-wal's meta store would wait forever.
	st.bolt, err = raftboltdb.New(raftboltdb.Options{
		Path: filepath.Join(dir, boltFileName),
		// NoFreelistSync + map freelist, as Consul's raft store sets them:
		// the freelist is rebuilt at open instead of rewritten on every
		// commit, a write that grows with the file; fsync of the
		// data itself stays on (NoSync false) — durability before ack.
		BoltOptions: &bbolt.Options{
			Timeout:        boltOpenLimit,
			NoFreelistSync: true,
			FreelistType:   bbolt.FreelistMapType,
		},
	})
	if err != nil {
		return nil, inUse(filepath.Join(dir, boltFileName), fmt.Errorf("open %s in %s: %w", boltFileName, dir, err))
	}
	if kind == LogStoreWAL {
		if segmentBytes <= 0 {
			segmentBytes = wal.DefaultSegmentSize
		}
		st.wal, err = openReopenWAL(walDir, logger, func() (*wal.WAL, error) {
			return wal.Open(walDir, wal.WithLogger(raftmux.HCLogger(logger, "raft-wal")), wal.WithSegmentSize(segmentBytes),
				wal.WithSegmentFiler(segment.NewFiler(walDir, newGrowFS(syncs))))
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
