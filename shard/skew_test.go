package shard

import (
	"testing"
	"time"

	"github.com/raftq/raftq/fsm/fsmpb"
)

// TestLeaseSurvivesFailoverToFastClock: the replicas that take over run
// 400 ms ahead (within MaxClockSkew). A lease granted just before the
// leader dies, due shortly after the failover, must not be expired by the
// new leader's first entry: the grace entry does not advance the clock, so
// the lease is extended to clock+grace and its holder can still ack.
func TestLeaseSurvivesFailoverToFastClock(t *testing.T) {
	// The grace extends the lease to the new leader's clock + grace: the
	// ack below must apply within it. 5 s leaves room for a loaded machine;
	// without the clock hold the grace entry itself expires the lease,
	// whatever the grace.
	c := newCluster(t, 3, true, fastTuning(), func(c *cluster) { c.grace = 5 * time.Second })
	old := c.leader()
	for _, f := range c.followers(old) {
		f.skew.Store(400)
	}
	mustQueue(t, old.sh, "q", standard(time.Minute))
	id := mustEnqueue(t, old.sh, "q", &fsmpb.NewMessage{Body: []byte("job")})
	got := mustReceive(t, old.sh, "q", 1, 700*time.Millisecond)
	if len(got) != 1 || got[0].GetId() != id {
		t.Fatalf("receive = %v", got)
	}
	killedAt := time.Now()
	c.kill(old)
	next := c.leader()
	t.Logf("new leader ready %v after the kill", time.Since(killedAt))

	m, ok := next.sh.FSM().Message(id)
	if !ok || m.GetState() != fsmpb.State_STATE_LEASED || m.GetLeaseEpoch() != got[0].GetLeaseEpoch() {
		t.Fatalf("after failover to a fast clock the lease is %v, want still leased", m)
	}
	if m.GetLeaseDeadlineMs() < next.sh.FSM().Clock()+500 {
		t.Fatalf("lease deadline %d not extended past clock %d", m.GetLeaseDeadlineMs(), next.sh.FSM().Clock())
	}
	res := mustPropose(t, next.sh, ackCmd(receiptOf(got[0])))
	if code := res.GetItems().GetItems()[0].GetStatus().GetCode(); code != fsmpb.Code_CODE_OK {
		t.Fatalf("ack by the lease holder after failover = %v, want OK", code)
	}
}

// TestLeaseKeepsItsLengthFromSlowToFastLeader: the worst leader change the
// clock check allows, from a leader 400 ms behind the median clock to one
// 400 ms ahead (both within the 500 ms bound, 800 ms apart). The lease
// granted by the slow leader must not end earlier in real time than its
// visibility timeout after the receive, judged by the fast leader's clock:
// LeaderGrace adds twice the bound to it. With the bound once (500 ms) it
// ended 300 ms early.
func TestLeaseKeepsItsLengthFromSlowToFastLeader(t *testing.T) {
	c := newCluster(t, 3, true, fastTuning())
	old := c.leader()
	old.skew.Store(-400)
	for _, f := range c.followers(old) {
		f.skew.Store(400)
	}
	mustQueue(t, old.sh, "q", standard(time.Minute))
	id := mustEnqueue(t, old.sh, "q", &fsmpb.NewMessage{Body: []byte("job")})
	// Let the slow clock pass the stamps made before it was slowed, so
	// the lease is granted on it (waiting longer only weakens nothing).
	time.Sleep(500 * time.Millisecond)
	const vis = 10 * time.Second
	before := time.Now()
	got := mustReceive(t, old.sh, "q", 1, vis)
	if len(got) != 1 || got[0].GetId() != id {
		t.Fatalf("receive = %v", got)
	}
	c.kill(old)
	next := c.leader()
	m, ok := next.sh.FSM().Message(id)
	if !ok || m.GetState() != fsmpb.State_STATE_LEASED || m.GetLeaseEpoch() != got[0].GetLeaseEpoch() {
		t.Fatalf("after the change to a fast leader the lease is %v, want still leased", m)
	}
	// The new leader's clock reads real time + 400 ms, so the lease lasts
	// its full length in real time iff its deadline is at least this.
	want := before.Add(vis + 400*time.Millisecond).UnixMilli()
	if d := m.GetLeaseDeadlineMs(); d < want {
		t.Fatalf("lease deadline %d ends %d ms early in real time after the leader change", d, want-d)
	}
}
