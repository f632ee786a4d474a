package integration

import (
	"context"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/internal/testcluster"
)

// BenchmarkClusterSend measures acknowledged (quorum-fsynced) sends of 1 KiB
// through the client on a 3-node loopback cluster, 64 senders in flight.
func BenchmarkClusterSend(b *testing.B) {
	c := testcluster.Start(b, nodeBin, testcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, bc := range []struct {
		name string
		opts []client.Option
	}{
		{"auto-dedup-to-leader", nil},
		{"keyless-round-robin", []client.Option{client.WithAutoDedup(false)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cl, err := client.Dial(ctx, c.Addrs(), bc.opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			if _, err := cl.CreateQueue(ctx, "bench", client.QueueOptions{}); err != nil {
				b.Fatal(err)
			}
			body := make([]byte, 1024)
			b.SetParallelism(32) // x GOMAXPROCS senders
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := cl.Send(ctx, "bench", body); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
