package fsm

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"testing"

	"github.com/raftq/raftq/fsm/fsmpb"
)

// benchBatch is the number of items per command: the proposer coalesces
// client requests, so per-item cost at a realistic batch is what matters.
const benchBatch = 100

// benchFSM applies pre-encoded entries to an FSM; encoding is the proposer's
// cost and stays outside the timer, decoding is part of Apply.
type benchFSM struct {
	b     *testing.B
	f     *FSM
	index uint64
	now   int64
}

func newBenchFSM(b *testing.B, p *fsmpb.QueuePolicy) *benchFSM {
	bf := &benchFSM{b: b, f: New(Options{Notify: func(string) {}}), now: t0}
	bf.apply(upsertCmd("q", p))
	return bf
}

func (bf *benchFSM) encode(cmds ...*fsmpb.Command) []byte {
	bf.now++
	data, err := EncodeEntry(&fsmpb.Entry{Version: EntryVersion, NowMs: bf.now, Seed: uint64(bf.now), Commands: cmds})
	if err != nil {
		bf.b.Fatal(err)
	}
	return data
}

func (bf *benchFSM) applyData(data []byte) *Response {
	bf.index++
	return bf.f.Apply(makeLog(bf.index, 1, data)).(*Response)
}

func (bf *benchFSM) apply(cmds ...*fsmpb.Command) *Response { return bf.applyData(bf.encode(cmds...)) }

func kib() *fsmpb.NewMessage { return &fsmpb.NewMessage{Body: make([]byte, 1024)} }

func (bf *benchFSM) fill(n int) {
	for n > 0 {
		k := min(n, 1000)
		ms := make([]*fsmpb.NewMessage, k)
		for i := range ms {
			ms[i] = kib()
		}
		bf.apply(enqueueCmd("q", ms...))
		n -= k
	}
}

// leaseAll receives n messages and returns their receipts.
func (bf *benchFSM) leaseAll(n int) []*fsmpb.Receipt {
	var rs []*fsmpb.Receipt
	for len(rs) < n {
		res := bf.apply(receiveCmd("q", uint32(min(n-len(rs), MaxReceiveBatch)), MaxVisibilityMs))
		for _, m := range res.Results[0].GetReceive().GetMessages() {
			rs = append(rs, receipt(m))
		}
	}
	return rs
}

func batches(n int) int { return (n + benchBatch - 1) / benchBatch }

// runBatches times applying pre-encoded entries and reports items/s.
func (bf *benchFSM) runBatches(data [][]byte) {
	b := bf.b
	b.ReportAllocs()
	b.ResetTimer()
	for _, d := range data {
		bf.applyData(d)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

func BenchmarkApply(b *testing.B) {
	b.Run("enqueue", func(b *testing.B) {
		bf := newBenchFSM(b, nil)
		var data [][]byte
		for i := 0; i < batches(b.N); i++ {
			ms := make([]*fsmpb.NewMessage, min(benchBatch, b.N-i*benchBatch))
			for j := range ms {
				ms[j] = kib()
			}
			data = append(data, bf.encode(enqueueCmd("q", ms...)))
		}
		bf.runBatches(data)
	})
	b.Run("receive", func(b *testing.B) {
		bf := newBenchFSM(b, nil)
		bf.fill(b.N)
		var data [][]byte
		for i := 0; i < batches(b.N); i++ {
			data = append(data, bf.encode(receiveCmd("q", uint32(min(benchBatch, b.N-i*benchBatch)), MaxVisibilityMs)))
		}
		bf.runBatches(data)
	})
	leased := func(b *testing.B, mk func(rs []*fsmpb.Receipt) *fsmpb.Command) {
		bf := newBenchFSM(b, &fsmpb.QueuePolicy{MaxReceiveCount: 100})
		bf.fill(b.N)
		rs := bf.leaseAll(b.N)
		var data [][]byte
		for i := 0; i < len(rs); i += benchBatch {
			data = append(data, bf.encode(mk(rs[i:min(i+benchBatch, len(rs))])))
		}
		bf.runBatches(data)
	}
	b.Run("ack", func(b *testing.B) {
		leased(b, func(rs []*fsmpb.Receipt) *fsmpb.Command { return ackCmd(rs...) })
	})
	b.Run("nack", func(b *testing.B) {
		leased(b, func(rs []*fsmpb.Receipt) *fsmpb.Command {
			items := make([]*fsmpb.NackItem, len(rs))
			for i, r := range rs {
				items[i] = nackBackoff(r, "transient")
			}
			return nackCmd(items...)
		})
	})
	b.Run("extend", func(b *testing.B) {
		leased(b, func(rs []*fsmpb.Receipt) *fsmpb.Command {
			items := make([]*fsmpb.ExtendItem, len(rs))
			for i, r := range rs {
				items[i] = &fsmpb.ExtendItem{Receipt: r, VisibilityTimeoutMs: 60_000}
			}
			return &fsmpb.Command{Cmd: &fsmpb.Command_Extend{Extend: &fsmpb.Extend{Items: items}}}
		})
	})
}

// BenchmarkMemoryPerMessage reports the heap held per queued 1 KiB message
// (body included) with a backlog of benchMemMessages. Run with -benchtime=1x.
func BenchmarkMemoryPerMessage(b *testing.B) {
	n := 1_000_000
	if testing.Short() {
		n = 100_000
	}
	for i := 0; i < b.N; i++ {
		before := heapInUse()
		bf := newBenchFSM(b, nil)
		bf.fill(n)
		after := heapInUse()
		st, _ := bf.f.Stats("q")
		if st.Ready != uint64(n) {
			b.Fatalf("ready %d, want %d", st.Ready, n)
		}
		b.ReportMetric(float64(after-before)/float64(n), "bytes/msg")
		b.ReportMetric(float64(n), "msgs")
		runtime.KeepAlive(bf)
	}
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkSnapshot measures Persist of a backlog of 1 KiB messages.
func BenchmarkSnapshot(b *testing.B) {
	bf := newBenchFSM(b, nil)
	n := 100_000
	bf.fill(n)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.SetBytes(int64(bf.persist()))
	}
	b.ReportMetric(float64(n), "msgs")
}

// persist takes a snapshot and streams it to a counting sink; it returns
// the snapshot's size.
func (bf *benchFSM) persist() int {
	snap, err := bf.f.Snapshot()
	if err != nil {
		bf.b.Fatal(err)
	}
	var sink countSink
	if err := snap.Persist(&sink); err != nil {
		bf.b.Fatal(err)
	}
	return sink.n
}

type countSink struct{ n int }

func (s *countSink) Write(p []byte) (int, error) { s.n += len(p); return len(p), nil }
func (s *countSink) ID() string                  { return "count" }
func (s *countSink) Cancel() error               { return nil }
func (s *countSink) Close() error                { return nil }

func (s *countSink) String() string { return fmt.Sprint(s.n) }

// BenchmarkLifecycle is the steady state of a busy shard replica: entries
// of benchBatch enqueues (1 KiB, each with a dedup key, as the Go client
// sends them), receives and acks, over a standing backlog of 50,000 ready
// messages and a full window of dedup keys and completed records. ns/op
// is the cost of one message's whole life (enqueue + lease + ack) on one
// replica; every replica of a shard pays it.
func BenchmarkLifecycle(b *testing.B) {
	bf := newBenchFSM(b, nil)
	const backlog = 50_000
	key := 0
	batch := func() *fsmpb.Command {
		ms := make([]*fsmpb.NewMessage, benchBatch)
		for i := range ms {
			key++
			ms[i] = &fsmpb.NewMessage{Body: make([]byte, 1024), DedupKey: fmt.Sprintf("auto-%032x-%d", key, key%8)}
		}
		return enqueueCmd("q", ms...)
	}
	cycle := func() {
		bf.apply(batch())
		res := bf.apply(receiveCmd("q", benchBatch, 60_000))
		var rs []*fsmpb.Receipt
		for _, m := range res.Results[0].GetReceive().GetMessages() {
			rs = append(rs, receipt(m))
		}
		bf.apply(ackCmd(rs...))
	}
	for range backlog / benchBatch {
		bf.apply(batch())
	}
	for range (MaxCompletedRecords + 50_000) / benchBatch { // fill the completed records, then churn
		cycle()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += benchBatch {
		cycle()
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkSnapshotSteady measures Persist of a busy shard without a
// backlog: what a steady run leaves behind is the dedup keys of the last
// window and the completed records, and raft snapshots it every
// SnapshotInterval on every replica. 600,000 keys is two minutes of one
// shard at 5,000 msgs/s (a 3-shard cluster at 15,000).
func BenchmarkSnapshotSteady(b *testing.B) {
	bf := newBenchFSM(b, nil)
	const keys = 600_000
	n := 0
	for n < keys {
		ms := make([]*fsmpb.NewMessage, 1000)
		for i := range ms {
			n++
			ms[i] = &fsmpb.NewMessage{Body: make([]byte, 1024), DedupKey: fmt.Sprintf("auto-%032x-%d", n, n%8)}
		}
		bf.apply(enqueueCmd("q", ms...))
		res := bf.apply(receiveCmd("q", MaxReceiveBatch, 60_000))
		var rs []*fsmpb.Receipt
		for _, m := range res.Results[0].GetReceive().GetMessages() {
			rs = append(rs, receipt(m))
		}
		bf.apply(ackCmd(rs...))
	}
	b.ReportAllocs()
	b.ResetTimer()
	var bytes int
	for i := 0; i < b.N; i++ {
		bytes = bf.persist()
	}
	b.StopTimer()
	b.ReportMetric(float64(bytes)/(1<<20), "MiB/snap")
}

// BenchmarkRestore reads back a snapshot of queued 1 KiB messages: what a
// restarting replica or a follower installing a snapshot pays per message.
func BenchmarkRestore(b *testing.B) {
	bf := newBenchFSM(b, nil)
	const n = 100_000
	bf.fill(n)
	snap, err := bf.f.Snapshot()
	if err != nil {
		b.Fatal(err)
	}
	var buf bytes.Buffer
	if err := snap.Persist(&bufSink{Buffer: &buf}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(buf.Len()))
	b.ResetTimer()
	for range b.N {
		f := New(Options{Notify: func(string) {}})
		if err := f.Restore(io.NopCloser(bytes.NewReader(buf.Bytes()))); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n), "msgs")
}

type bufSink struct{ *bytes.Buffer }

func (bufSink) ID() string    { return "buf" }
func (bufSink) Cancel() error { return nil }
func (bufSink) Close() error  { return nil }
