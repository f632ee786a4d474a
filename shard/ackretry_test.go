package shard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/raftgroup"
)

// ackAnywhere proposes an ack of one receipt at whichever replica leads,
// through leader changes, and returns its item result.
func (c *cluster) ackAnywhere(r *fsmpb.Receipt) *fsmpb.ItemResult {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		res, err := c.proposeAnywhere(ctx, ackCmd(r))
		if err == nil {
			return res.GetItems().GetItems()[0]
		}
		if !errors.Is(err, raftgroup.ErrUnknownResult) || ctx.Err() != nil {
			c.t.Fatalf("ack of message %d: %v", r.GetMessageId(), err)
		}
	}
}

// An ack commits, its answer is lost with the leader (kill, no transfer),
// and the consumer retries at the new leader: the retry succeeds, marked
// already_acked, on a replica that learned the ack through the log. A nack
// with the same receipt is refused: the message is done.
func TestAckRetriedAtNewLeaderAfterLostAnswer(t *testing.T) {
	c := newCluster(t, 3, false, fastTuning())
	leader := c.leader()
	mustQueue(t, leader.sh, "q", standard(time.Minute))
	id := mustEnqueue(t, leader.sh, "q", &fsmpb.NewMessage{Body: []byte("job")})
	ms := mustReceive(t, leader.sh, "q", 1, time.Minute)
	if len(ms) != 1 || ms[0].GetId() != id {
		t.Fatalf("receive = %v", ms)
	}
	r := receiptOf(ms[0])
	// The ack commits; the consumer never sees this answer.
	if it := mustPropose(t, leader.sh, ackCmd(r)).GetItems().GetItems()[0]; it.GetStatus().GetCode() != fsmpb.Code_CODE_OK || it.GetAlreadyAcked() {
		t.Fatalf("first ack = %v", it)
	}
	c.kill(leader)

	next := c.leader()
	if next == leader {
		t.Fatal("the killed replica still leads")
	}
	it := c.ackAnywhere(r)
	if it.GetStatus().GetCode() != fsmpb.Code_CODE_OK || !it.GetAlreadyAcked() {
		t.Fatalf("retried ack at the new leader = %v already_acked=%v, want OK already_acked", it.GetStatus(), it.GetAlreadyAcked())
	}
	res, err := c.proposeAnywhere(context.Background(), &fsmpb.Command{Cmd: &fsmpb.Command_Nack{Nack: &fsmpb.Nack{Items: []*fsmpb.NackItem{{Receipt: r, HasDelay: true}}}}})
	if err != nil {
		t.Fatalf("nack: %v", err)
	}
	if st := res.GetItems().GetItems()[0].GetStatus(); st.GetCode() != fsmpb.Code_CODE_STALE_RECEIPT || !strings.Contains(st.GetMessage(), "already acked") {
		t.Fatalf("nack after ack = %v, want STALE_RECEIPT saying already acked", st)
	}
	c.converge()
	for _, nd := range c.live() {
		m, ok := nd.sh.FSM().Message(id)
		if !ok || m.GetState() != fsmpb.State_STATE_ACKED {
			t.Fatalf("%s: message %d = %v, want ACKED", nd.id, id, m)
		}
		if n := nd.sh.FSM().Counters().GetAcked(); n != 1 {
			t.Fatalf("%s: acked counter %d, want 1: the repeat counted again", nd.id, n)
		}
	}
}

// Acks in flight when the leader is killed have an unknown outcome: some
// committed, some did not. Retrying every one at the new leader must
// succeed for all, whichever way each went; none may come back stale.
func TestAcksInFlightAtLeaderKillAllSucceedOnRetry(t *testing.T) {
	c := newCluster(t, 3, false, fastTuning())
	leader := c.leader()
	mustQueue(t, leader.sh, "q", standard(time.Minute))
	const n = 40
	for i := range n {
		mustEnqueue(t, leader.sh, "q", &fsmpb.NewMessage{Body: fmt.Appendf(nil, "m%d", i)})
	}
	ms := mustReceive(t, leader.sh, "q", n, time.Minute)
	if len(ms) != n {
		t.Fatalf("received %d of %d", len(ms), n)
	}
	sh := leader.sh // kill clears leader.sh
	var wg sync.WaitGroup
	started := make(chan struct{}, n)
	for _, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			started <- struct{}{}
			_, _ = sh.Propose(ctx, ackCmd(receiptOf(m))) // the answer is lost either way
		}()
	}
	for range n / 2 {
		<-started
	}
	c.kill(leader)
	wg.Wait()

	repeats := 0
	for _, m := range ms {
		it := c.ackAnywhere(receiptOf(m))
		if it.GetStatus().GetCode() != fsmpb.Code_CODE_OK {
			t.Errorf("retried ack of message %d = %v, want success", m.GetId(), it.GetStatus())
		}
		if it.GetAlreadyAcked() {
			repeats++
		}
	}
	t.Logf("%d of %d retried acks repeated one that had committed before the kill", repeats, n)
	c.converge()
	for _, nd := range c.live() {
		if got := nd.sh.FSM().Counters().GetAcked(); got != n {
			t.Fatalf("%s: acked counter %d, want %d", nd.id, got, n)
		}
	}
}
