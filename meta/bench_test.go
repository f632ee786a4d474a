package meta

import (
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/raftq/raftq/meta/metapb"
)

func BenchmarkPlace(b *testing.B) {
	for _, tc := range []struct {
		shards uint32
		nodes  int
	}{{8, 3}, {64, 5}, {256, 9}} {
		nodes := nodeIDs(tc.nodes)
		b.Run(fmt.Sprintf("%d_shards_%d_nodes", tc.shards, tc.nodes), func(b *testing.B) {
			for b.Loop() {
				Place(tc.shards, 3, nodes)
			}
		})
	}
}

func BenchmarkFSMApplyCreate(b *testing.B) {
	f := NewFSM(nil)
	logs := make([]*raft.Log, 1024)
	for i := range logs {
		cmd := createCmd(fmt.Sprintf("q-%d", i), policy(1000))
		cmd.Version = CommandVersion
		data, err := proto.Marshal(cmd)
		if err != nil {
			b.Fatal(err)
		}
		logs[i] = &raft.Log{Type: raft.LogCommand, Data: data}
	}
	var idx uint64
	for b.Loop() {
		idx++
		l := *logs[idx%uint64(len(logs))]
		l.Index = idx
		if _, ok := f.Apply(&l).(*metapb.Result); !ok {
			b.Fatal("no result")
		}
	}
}
