package router

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/peer/peerpb"
	"github.com/raftq/raftq/shard"
)

// ledSet is a shardSet whose local replicas lead their shards.
type ledSet struct{ shardSet }

func (t ledSet) ShardLeader(id uint32) (string, string, bool) {
	if t.local[id] != nil {
		return t.NodeID(), "", true
	}
	return "", "", false
}

// A stats read of a queue carries the moves the shard's leader counted
// (shard.Shard.QueueMoves): what the API's QueueStats sums over shards.
// The shard is a real one-voter raft group led by this node.
func TestStatsReadCarriesTheLeadersMoves(t *testing.T) {
	sh := openLoneShard(t, 0)
	r := New(ledSet{shardSet{n: 1, local: map[uint32]*shard.Shard{0: sh}}}, Options{LeaderWait: 20 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	apply := func(c *fsmpb.Command) *fsmpb.Result {
		t.Helper()
		res, err := r.Apply(ctx, 0, c)
		if err != nil || res.GetStatus().GetCode() != fsmpb.Code_CODE_OK {
			t.Fatalf("apply %v: %v %v", c, err, res.GetStatus())
		}
		return res
	}
	apply(&fsmpb.Command{Cmd: &fsmpb.Command_UpsertQueue{UpsertQueue: &fsmpb.UpsertQueue{Queue: "q", Policy: &fsmpb.QueuePolicy{}}}})
	apply(&fsmpb.Command{Cmd: &fsmpb.Command_Enqueue{Enqueue: &fsmpb.Enqueue{Queue: "q", Messages: []*fsmpb.NewMessage{
		{Body: []byte("a")}, {Body: []byte("b"), DedupKey: "k"},
	}}}})
	// The retry of a keyed send enqueues nothing and is no send.
	apply(&fsmpb.Command{Cmd: &fsmpb.Command_Enqueue{Enqueue: &fsmpb.Enqueue{Queue: "q", Messages: []*fsmpb.NewMessage{
		{Body: []byte("b"), DedupKey: "k"},
	}}}})
	leased, _, err := r.Receive(ctx, &fsmpb.Receive{Queue: "q", Max: 2}, 0)
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	if len(leased) != 2 {
		t.Fatalf("received %d messages, want 2", len(leased))
	}
	for _, l := range leased {
		apply(&fsmpb.Command{Cmd: &fsmpb.Command_Ack{Ack: &fsmpb.Ack{Receipts: []*fsmpb.Receipt{
			{MessageId: l.Message.GetId(), LeaseEpoch: l.Message.GetLeaseEpoch()},
		}}}})
	}

	resp, err := r.Read(ctx, &peerpb.ShardReadRequest{ShardId: 0, Query: &peerpb.ShardReadRequest_StatsQueue{StatsQueue: "q"}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{fsm.MoveSent: 2, fsm.MoveReceived: 2, fsm.MoveAcked: 2}
	if got := resp.GetStats().GetMoves(); !maps.Equal(got, want) {
		t.Fatalf("stats moves %v, want %v", got, want)
	}
}
