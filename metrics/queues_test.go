package metrics

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/shard"
)

// queueSet is a QueueSource whose queues the test creates and deletes.
type queueSet struct {
	mu sync.Mutex
	qs map[string]bool
}

func newQueueSet(names ...string) *queueSet {
	s := &queueSet{qs: map[string]bool{}}
	for _, n := range names {
		s.qs[n] = true
	}
	return s
}

func (s *queueSet) Queue(name string) (meta.Queue, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return meta.Queue{Name: name}, s.qs[name]
}

func (s *queueSet) Queues() []meta.Queue {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []meta.Queue
	for n := range s.qs {
		out = append(out, meta.Queue{Name: n})
	}
	return out
}

func (s *queueSet) delete(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.qs, name)
}

type shardsOf []*shard.Shard

func (s shardsOf) LocalShards() []*shard.Shard { return s }

// A flood of queue names cannot grow the registry past the cap: queues
// past it and names that are no queue are counted under _other, and a
// deleted queue's series go and free its place.
func TestQueueLabelsAreBounded(t *testing.T) {
	var names []string
	for i := range 1000 {
		names = append(names, fmt.Sprintf("q%04d", i))
	}
	src := newQueueSet(names...)
	m := New(shardsOf(nil), WithMaxQueueLabels(3), WithQueueSource(src))
	for _, n := range names {
		m.Count(n, "sent", 1)
	}
	for i := range 1000 {
		m.Count(fmt.Sprintf("no-such-queue-%d", i), "sent", 1)
	}
	if n := testutil.CollectAndCount(m.messages); n != 4 {
		t.Fatalf("%d raftq_messages_total series after 2000 queue names, want 3 queues + _other", n)
	}
	if v := testutil.ToFloat64(m.messages.WithLabelValues(OtherQueue, "sent")); v != 1997 {
		t.Fatalf("_other counted %v sends, want 1997", v)
	}
	if v := testutil.ToFloat64(m.messages.WithLabelValues("q0001", "sent")); v != 1 {
		t.Fatalf("q0001 counted %v sends, want 1", v)
	}

	src.delete("q0001")
	out := scrape(t, m)
	if strings.Contains(out, `queue="q0001"`) {
		t.Fatal("the deleted queue's series are still served")
	}
	m.Count("q0999", "sent", 1)
	if !strings.Contains(scrape(t, m), `raftq_messages_total{event="sent",queue="q0999"} 1`) {
		t.Fatal("a queue did not take the label freed by a deleted queue")
	}
}

// openShard starts a lone shard replica on an in-memory transport and
// waits until it leads.
func openShard(t *testing.T) *shard.Shard {
	t.Helper()
	_, tr := raft.NewInmemTransport("n1")
	sh, err := shard.Open(shard.Config{
		ID: 1, NodeID: "n1", Dir: t.TempDir(), Transport: tr,
		Bootstrap: []raft.Server{{ID: "n1", Address: tr.LocalAddr()}},
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		Raft: raftgroup.RaftTuning{HeartbeatTimeout: 400 * time.Millisecond, ElectionTimeout: 400 * time.Millisecond,
			LeaderLeaseTimeout: 200 * time.Millisecond, CommitTimeout: 5 * time.Millisecond},
		LeaseGrace: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sh.Shutdown(context.Background()) })
	deadline := time.Now().Add(20 * time.Second)
	for !sh.IsLeader() {
		if time.Now().After(deadline) {
			t.Fatal("the lone replica did not lead within 20 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return sh
}

func propose(t *testing.T, sh *shard.Shard, c *fsmpb.Command) *fsmpb.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := sh.Propose(ctx, c)
	if err != nil || res.GetStatus().GetCode() != fsmpb.Code_CODE_OK {
		t.Fatalf("propose %v: %v %v", c, err, res.GetStatus())
	}
	return res
}

// Transitions and settle events reach the registry with their queue, from
// a real raft shard: a nack, an ack, a lease expiry on the last receive
// (which also dead-letters) and a redrive.
func TestTransitionsFromALedShard(t *testing.T) {
	sh := openShard(t)
	m := New(shardsOf{sh}, WithQueueSource(newQueueSet("jobs")))
	propose(t, sh, &fsmpb.Command{Cmd: &fsmpb.Command_UpsertQueue{UpsertQueue: &fsmpb.UpsertQueue{Queue: "jobs",
		Policy: &fsmpb.QueuePolicy{VisibilityTimeoutMs: 200, MaxReceiveCount: 2}}}})
	send := func() {
		propose(t, sh, &fsmpb.Command{Cmd: &fsmpb.Command_Enqueue{Enqueue: &fsmpb.Enqueue{Queue: "jobs",
			Messages: []*fsmpb.NewMessage{{Body: []byte("x")}}}}})
	}
	receive := func() *fsmpb.Receipt {
		res := propose(t, sh, &fsmpb.Command{Cmd: &fsmpb.Command_Receive{Receive: &fsmpb.Receive{Queue: "jobs", Max: 1}}})
		ms := res.GetReceive().GetMessages()
		if len(ms) != 1 {
			t.Fatalf("received %d messages, want 1", len(ms))
		}
		return &fsmpb.Receipt{MessageId: ms[0].GetId(), LeaseEpoch: ms[0].GetLeaseEpoch()}
	}
	send()
	propose(t, sh, &fsmpb.Command{Cmd: &fsmpb.Command_Nack{Nack: &fsmpb.Nack{Items: []*fsmpb.NackItem{{Receipt: receive(), HasDelay: true}}}}})
	_ = receive() // the last receive: its lease runs out (the leader ticks) and the message goes dead
	send()
	propose(t, sh, &fsmpb.Command{Cmd: &fsmpb.Command_Ack{Ack: &fsmpb.Ack{Receipts: []*fsmpb.Receipt{receive()}}}})

	want := map[string]float64{
		`raftq_queue_transitions_total{queue="jobs",reason="nacked"}`:        1,
		`raftq_queue_transitions_total{queue="jobs",reason="lease_expired"}`: 1,
		`raftq_queue_transitions_total{queue="jobs",reason="dead_lettered"}`: 1,
		`raftq_messages_total{event="nacked",queue="jobs"}`:                  1,
		`raftq_messages_total{event="acked",queue="jobs"}`:                   1,
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		out := scrape(t, m)
		missing := ""
		for k, v := range want {
			if !strings.Contains(out, fmt.Sprintf("%s %v\n", k, v)) {
				missing = k
			}
		}
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics lacks %s = %v:\n%s", missing, want[missing], grepLines(out, "jobs"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	propose(t, sh, &fsmpb.Command{Cmd: &fsmpb.Command_Redrive{Redrive: &fsmpb.Redrive{Queue: "jobs"}}})
	out := scrape(t, m)
	if !strings.Contains(out, `raftq_queue_transitions_total{queue="jobs",reason="redriven"} 1`+"\n") ||
		!strings.Contains(out, `raftq_queue_transitions_total{queue="jobs",reason="nacked"} 1`+"\n") {
		t.Fatalf("after a redrive:\n%s", grepLines(out, "jobs"))
	}
	// The shard also counts sends and leases (for queue stats), but the
	// metrics count those by API call (Metrics.Count) and must not get
	// them a second time from the shard.
	for _, l := range strings.Split(grepLines(out, "jobs"), "\n") {
		if strings.Contains(l, `"sent"`) || strings.Contains(l, `"received"`) {
			t.Fatalf("the shard's send or lease counts reached /metrics: %s", l)
		}
	}
	moves := map[string]uint64{}
	for _, mv := range sh.Moves() {
		moves[mv.Event] = mv.N
	}
	if moves["sent"] != 2 || moves["received"] != 3 {
		t.Fatalf("the shard counted moves %v, want sent 2, received 3", moves)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
