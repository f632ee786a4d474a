package shard

import (
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
	if sum["q/"+fsm.MoveNacked] != 1 || sum["q/"+fsm.MoveAcked] != 1 || len(sum) != 2 {
		t.Fatalf("moves over the replicas %v, want q/nacked 1 and q/acked 1", sum)
	}

	mustPropose(t, leader.sh, &fsmpb.Command{Cmd: &fsmpb.Command_DeleteQueue{DeleteQueue: &fsmpb.DeleteQueue{Queue: "q"}}})
	if got := movesOf(leader.sh); len(got) != 0 {
		t.Fatalf("after the queue was deleted the leader still reports %v", got)
	}
}
