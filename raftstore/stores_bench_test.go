package raftstore

import (
	"fmt"
	"io"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// BenchmarkLogStoreAppend measures one leader StoreLogs call (one raft
// round, fsync included) on each log store, with the head compacted as
// raft does after a snapshot so the store's size stays steady. Besides
// ns/op (wall) it reports cpu-ns/op: the process's user+system CPU per
// call, which is what a node on two cores runs out of.
//
//	go test -run XXX -bench BenchmarkLogStoreAppend -benchtime 2000x ./raftstore/
func BenchmarkLogStoreAppend(b *testing.B) {
	shapes := []struct{ entries, bytes int }{{1, 2 << 10}, {8, 2 << 10}, {64, 16 << 10}}
	for _, kind := range []string{LogStoreWAL, LogStoreBolt} {
		for _, sh := range shapes {
			b.Run(fmt.Sprintf("%s/%dx%dKiB", kind, sh.entries, sh.bytes>>10), func(b *testing.B) {
				benchmarkAppend(b, kind, sh.entries, sh.bytes)
			})
		}
	}
}

func benchmarkAppend(b *testing.B, kind string, entries, size int) {
	st, err := openStores(b.TempDir(), kind, 0, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := st.Close(); err != nil {
			b.Error(err)
		}
	}()
	// Keep about as much log as production's TrailingLogs default keeps
	// (10,240 entries), trimmed in steps as snapshots would.
	const keep, trimEvery = 10240, 2048
	body := make([]byte, size)
	batch := make([]*raft.Log, entries)
	next, first := uint64(1), uint64(1)
	b.SetBytes(int64(entries * size))
	b.ResetTimer()
	cpu0 := cpuTime(b)
	for i := 0; i < b.N; i++ {
		for j := range batch {
			batch[j] = &raft.Log{Index: next, Term: 1, Type: raft.LogCommand, Data: body}
			next++
		}
		if err := st.logs.StoreLogs(batch); err != nil {
			b.Fatal(err)
		}
		if next-first > keep+trimEvery {
			if err := st.logs.DeleteRange(first, next-keep-1); err != nil {
				b.Fatal(err)
			}
			first = next - keep
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// cpuTime is the process's user plus system CPU so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
