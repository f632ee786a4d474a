package client

import (
	"context"
	"testing"

	"github.com/raftq/raftq/client/clienttest"
)

// These measure the client's own cost per call (routing, dedup keys, error
// mapping, one loopback gRPC round trip) against the in-memory fake node;
// they say nothing about the cluster's throughput.

func BenchmarkSend(b *testing.B) {
	s := clienttest.NewServer(b)
	c, err := Dial(context.Background(), []string{s.Addr})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if _, err := c.CreateQueue(context.Background(), "q", QueueOptions{}); err != nil {
		b.Fatal(err)
	}
	body := make([]byte, 1024)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Send(context.Background(), "q", body, Group("g")); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkPick(b *testing.B) {
	c := &Client{seeds: []string{"a:1"}}
	c.smap.Store(&shardMap{count: 8, leaders: []string{"a:1", "b:1", "c:1", "a:1", "b:1", "c:1", "a:1", ""}, nodes: []string{"a:1", "b:1", "c:1"}})
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_ = c.pick(c.shardOf("q", "group", "")-1+i%2, "")
	}
}
