package shard

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/raftgroup"
)

// benchCluster is three replicas over real TCP (raftmux) with bolt files
// and fsync on, with the production raft defaults.
func benchCluster(b *testing.B) (*cluster, *Shard) {
	b.Helper()
	c := newCluster(b, 3, false, raftgroup.RaftTuning{})
	leader := c.leader()
	mustQueue(b, leader.sh, "bench", &fsmpb.QueuePolicy{Mode: fsmpb.QueueMode_QUEUE_MODE_STANDARD, VisibilityTimeoutMs: 60_000})
	return c, leader.sh
}

func reportLatency(b *testing.B, h *hdrhistogram.Histogram, ops int64, elapsed time.Duration) {
	b.ReportMetric(float64(ops)/elapsed.Seconds(), "ops/s")
	b.ReportMetric(float64(h.ValueAtQuantile(50))/1000, "p50_ms")
	b.ReportMetric(float64(h.ValueAtQuantile(99))/1000, "p99_ms")
}

// BenchmarkCommit measures one-message enqueue commits through the
// group-commit proposer at several proposer concurrencies.
func BenchmarkCommit(b *testing.B) {
	c, leader := benchCluster(b)
	body := make([]byte, 1024)
	for _, procs := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("proposers=%d", procs), func(b *testing.B) {
			h := hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3)
			var hmu sync.Mutex
			var next atomic.Int64
			before := leader.ProposerStats()
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for range procs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					local := hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3)
					for next.Add(1) <= int64(b.N) {
						t0 := time.Now()
						if _, err := leader.Propose(context.Background(), enqueueCmd("bench", &fsmpb.NewMessage{Body: body})); err != nil {
							b.Error(err)
							return
						}
						_ = local.RecordValue(time.Since(t0).Microseconds())
					}
					hmu.Lock()
					h.Merge(local)
					hmu.Unlock()
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			after := leader.ProposerStats()
			reportLatency(b, h, int64(b.N), elapsed)
			if e := after.Entries - before.Entries; e > 0 {
				b.ReportMetric(float64(after.Commands-before.Commands)/float64(e), "cmds/entry")
			}
		})
	}
	_ = c
}

// BenchmarkEndToEnd drives enqueue + receive + ack of 1 KiB messages:
// 16 producers sending batches of 16, 8 consumers receiving up to 64 with a
// long poll and acking each batch. b.N is the number of messages.
func BenchmarkEndToEnd(b *testing.B) {
	_, leader := benchCluster(b)
	body := make([]byte, 1024)
	const producers, consumers, sendBatch, recvBatch = 16, 8, 16, 64
	var sent, acked atomic.Int64
	total := int64(b.N)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msgs := make([]*fsmpb.NewMessage, sendBatch)
			for i := range msgs {
				msgs[i] = &fsmpb.NewMessage{Body: body}
			}
			for sent.Add(sendBatch) <= total+sendBatch-1 {
				if _, err := leader.Propose(ctx, enqueueCmd("bench", msgs...)); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	for range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for acked.Load() < total && ctx.Err() == nil {
				res, err := pollClaim(ctx, leader, &fsmpb.Receive{Queue: "bench", Max: recvBatch}, 100*time.Millisecond)
				if err != nil {
					b.Error(err)
					return
				}
				got := res.GetReceive().GetMessages()
				if len(got) == 0 {
					continue
				}
				rs := make([]*fsmpb.Receipt, len(got))
				for i, m := range got {
					rs[i] = receiptOf(m)
				}
				if _, err := leader.Propose(ctx, ackCmd(rs...)); err != nil {
					b.Error(err)
					return
				}
				acked.Add(int64(len(got)))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(acked.Load())/elapsed.Seconds(), "msgs/s")
	st := leader.ProposerStats()
	b.ReportMetric(float64(st.Commands)/float64(max(st.Entries, 1)), "cmds/entry")
}
