package shard

import (
	"maps"
	"testing"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/fsmpb"
)

func movesOf(s *Shard) map[string]uint64 {
	out := map[string]uint64{}
	for _, m := range s.Moves() {
		out[m.Queue+"/"+m.Event] = m.N
	}
	return out
}

// Only the leader counts the moves every replica applies, so the sum over
// the replicas is the number of moves; a deleted queue's counts go.
func TestMovesCountedOnceByTheLeader(t *testing.T) {
	c := newCluster(t, 3, true, fastTuning())
	leader := c.leader()
	mustQueue(t, leader.sh, "q", standard(0))
	mustEnqueue(t, leader.sh, "q", &fsmpb.NewMessage{Body: []byte("a")})
	ms := mustReceive(t, leader.sh, "q", 1, 0)
	if len(ms) != 1 {
		t.Fatalf("received %d messages, want 1", len(ms))
	}
	mustPropose(t, leader.sh, &fsmpb.Command{Cmd: &fsmpb.Command_Nack{Nack: &fsmpb.Nack{Items: []*fsmpb.NackItem{{
		Receipt: receiptOf(ms[0]), HasDelay: true,
	}}}}})
	ms = mustReceive(t, leader.sh, "q", 1, 0)
	mustPropose(t, leader.sh, ackCmd(receiptOf(ms[0])))
	c.converge()

	sum := map[string]uint64{}
	for _, nd := range c.live() {
		for k, n := range movesOf(nd.sh) {
			if nd != leader {
				t.Errorf("follower %s counted %s = %d", nd.id, k, n)
			}
			sum[k] += n
		}
	}
	want := map[string]uint64{"q/" + fsm.MoveSent: 1, "q/" + fsm.MoveReceived: 2, "q/" + fsm.MoveNacked: 1, "q/" + fsm.MoveAcked: 1}
	if !maps.Equal(sum, want) {
		t.Fatalf("moves over the replicas %v, want %v", sum, want)
	}
	// Queue stats read one queue's counts from the leader.
	for _, nd := range c.live() {
		got := nd.sh.QueueMoves("q")
		switch {
		case nd == leader && (got[fsm.MoveSent] != 1 || got[fsm.MoveReceived] != 2 || got[fsm.MoveNacked] != 1 || got[fsm.MoveAcked] != 1 || len(got) != 4):
			t.Errorf("leader's QueueMoves(q) = %v, want sent 1, received 2, nacked 1, acked 1", got)
		case nd != leader && len(got) != 0:
			t.Errorf("follower %s's QueueMoves(q) = %v, want none", nd.id, got)
		}
	}
	if got := leader.sh.QueueMoves("other"); got != nil {
		t.Errorf("QueueMoves of a queue with no moves = %v, want nil", got)
	}

	mustPropose(t, leader.sh, &fsmpb.Command{Cmd: &fsmpb.Command_DeleteQueue{DeleteQueue: &fsmpb.DeleteQueue{Queue: "q"}}})
	if got := movesOf(leader.sh); len(got) != 0 {
		t.Fatalf("after the queue was deleted the leader still reports %v", got)
	}
	if got := leader.sh.QueueMoves("q"); got != nil {
		t.Fatalf("after the queue was deleted and Moves forgot it, QueueMoves(q) = %v", got)
	}
}
