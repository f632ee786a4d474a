package systest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/internal/testcluster"
	"github.com/raftq/raftq/wire"
)

// quickConn dials node i with reconnects every 50-200 ms instead of gRPC's
// default backoff (1 s growing to 2 min), so callers reach a restarted node
// as soon as it listens: while it is still loading the shard map.
func quickConn(t *testing.T, c *testcluster.Cluster, i int) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(c.Nodes[i].GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, MaxDelay: 200 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
	if err != nil {
		t.Fatalf("dial %s: %v", c.Nodes[i].ID, err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// sendTally counts what the hammering sends got back.
type sendTally struct {
	mu       sync.Mutex
	acked    map[string]bool // body -> acknowledged
	invalid  []string        // INVALID_ARGUMENT answers (must stay empty)
	starting atomic.Int64    // "node ... is starting" refusals
	refused  atomic.Int64    // UNAVAILABLE with the raftq-leader trailer
	other    atomic.Int64    // anything else that failed (node down, unknown outcome)
}

func (s *sendTally) note(bodies []string, err error, trailer metadata.MD) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		for _, b := range bodies {
			s.acked[b] = true
		}
		return
	}
	st, _ := status.FromError(err)
	switch {
	case st.Code() == codes.InvalidArgument:
		s.invalid = append(s.invalid, fmt.Sprintf("%v: %s", bodies, st.Message()))
	case st.Code() == codes.Unavailable && len(trailer.Get("raftq-leader")) > 0:
		s.refused.Add(1)
		if strings.Contains(st.Message(), "is starting") {
			s.starting.Add(1)
		}
	default:
		s.other.Add(1)
	}
}

// hammer sends to conn until stop closes: ungrouped keyless sends (the
// kind that crashed a starting node), grouped ones, and batches. Nothing
// is retried: each body is sent once and counted only if acknowledged.
func hammer(ctx context.Context, cc *grpc.ClientConn, name string, tally *sendTally, stop <-chan struct{}) {
	mc := raftqv1.NewMessagesClient(cc)
	for k := 0; ; k++ {
		select {
		case <-stop:
			return
		default:
		}
		if ctx.Err() != nil {
			return
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var trailer metadata.MD
		var bodies []string
		var err error
		switch k % 3 {
		case 0:
			bodies = []string{fmt.Sprintf("%s-%d", name, k)}
			_, err = mc.Send(cctx, &raftqv1.SendRequest{Queue: "hammer", Body: []byte(bodies[0])}, grpc.Trailer(&trailer))
		case 1:
			bodies = []string{fmt.Sprintf("%s-%d", name, k)}
			_, err = mc.Send(cctx, &raftqv1.SendRequest{Queue: "hammer", Body: []byte(bodies[0]), GroupId: fmt.Sprintf("g%d", k%8)}, grpc.Trailer(&trailer))
		default:
			bodies = []string{fmt.Sprintf("%s-%d-a", name, k), fmt.Sprintf("%s-%d-b", name, k)}
			var resp *raftqv1.SendBatchResponse
			resp, err = mc.SendBatch(cctx, &raftqv1.SendBatchRequest{Queue: "hammer", Messages: []*raftqv1.SendRequest{
				{Body: []byte(bodies[0])}, {Body: []byte(bodies[1])},
			}}, grpc.Trailer(&trailer))
			if err == nil {
				// Items are answered one by one; record each on its own.
				for i, r := range resp.GetResults() {
					var ierr error
					if r.GetCode() != 0 {
						ierr = status.Error(codes.Code(r.GetCode()), r.GetError())
					}
					tally.note(bodies[i:i+1], ierr, nil)
				}
				cancel()
				continue
			}
		}
		cancel()
		tally.note(bodies, err, trailer)
		if err != nil {
			time.Sleep(20 * time.Millisecond) // a down node refuses at once: do not spin
		}
	}
}

// A node restarted (kill -9, then start) while clients keep sending to it
// and through the other nodes for the whole restart: it answers the sends
// that arrive before it has loaded the shard map UNAVAILABLE, marked as
// not applied, and stays up. It used to crash on them (integer divide by
// zero), again on every restart, and to answer forwarded calls
// INVALID_ARGUMENT, which clients take as final. Every acknowledged send is
// delivered afterwards.
func TestCluster_RestartUnderSendsNeverCrashes(t *testing.T) {
	c := startCluster(t, testcluster.Options{})
	mustCreateQueue(t, c, "hammer", &raftqv1.QueuePolicy{VisibilityTimeoutMs: 30_000})
	ctx := ctxT(t, 4*time.Minute)
	victim := shardLeader(t, c, 0, 0) // other nodes' hints point at it

	tally := &sendTally{acked: map[string]bool{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range c.Nodes {
		cc := quickConn(t, c, i)
		workers := 2
		if i == victim {
			workers = 4
		}
		for w := range workers {
			wg.Go(func() { hammer(ctx, cc, fmt.Sprintf("n%d.%d", i+1, w), tally, stop) })
		}
	}
	stopped := false
	stopHammer := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer stopHammer()

	time.Sleep(time.Second)
	before := func() int {
		tally.mu.Lock()
		defer tally.mu.Unlock()
		return len(tally.acked)
	}
	// The window (the node up, its shard map not loaded) lasts tens of
	// milliseconds, and the senders' reconnect backoff can step over it on
	// a busy machine: the restart is repeated, up to three times, until a
	// send lands in it. Every round checks the same thing.
	for round := 1; round <= 3 && tally.starting.Load() == 0; round++ {
		c.Kill(victim)
		c.Restart(victim)
		restartedAt := time.Now()
		if err := c.WaitServing(ctx, victim); err != nil {
			t.Fatalf("restarted %s never served: %v", c.Nodes[victim].ID, err)
		}
		t.Logf("round %d: %s serving %v after its restart", round, c.Nodes[victim].ID, time.Since(restartedAt).Round(time.Millisecond))
		// Keep sending until the restarted node has acknowledged sends again.
		for base := before(); before() < base+50; {
			if ctx.Err() != nil {
				t.Fatalf("sends stopped being acknowledged after the restart")
			}
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(time.Second)
	}
	stopHammer()

	tally.mu.Lock()
	acked, invalid := len(tally.acked), tally.invalid
	tally.mu.Unlock()
	t.Logf("acknowledged %d sends; %d refused as not applied (%d by the starting node), %d other failures",
		acked, tally.refused.Load(), tally.starting.Load(), tally.other.Load())
	if !c.Running(victim) {
		t.Fatalf("%s exited on its own after its restart", c.Nodes[victim].ID)
	}
	if log, err := os.ReadFile(c.Nodes[victim].LogPath); err == nil && strings.Contains(string(log), "panic:") {
		t.Fatalf("%s logged a panic", c.Nodes[victim].ID)
	}
	for _, s := range invalid[:min(len(invalid), 5)] {
		t.Errorf("a valid send got INVALID_ARGUMENT: %s", s)
	}
	if len(invalid) > 0 {
		t.Fatalf("%d valid sends got INVALID_ARGUMENT", len(invalid))
	}
	if tally.starting.Load() == 0 {
		t.Errorf("no send reached %s before it loaded the shard map: the test missed the window it is about", c.Nodes[victim].ID)
	}

	got := drain(t, c, (victim+1)%len(c.Nodes), "hammer", 3)
	seen := map[string]bool{}
	for _, b := range got {
		seen[b] = true
	}
	lost := 0
	for b := range tally.acked {
		if !seen[b] {
			lost++
			if lost <= 5 {
				t.Errorf("acknowledged send %s was never delivered", b)
			}
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d acknowledged sends lost", lost, acked)
	}
}

// An ack commits at a shard's leader and its answer is lost with the
// leader (kill -9); the consumer retries through another node. The retry
// succeeds, marked already_acked: the consumer learns its ack went through
// instead of being told, as before, that its lease was gone.
func TestCluster_AckRetriedAfterLeaderKillSucceeds(t *testing.T) {
	c := startCluster(t, testcluster.Options{})
	mustCreateQueue(t, c, "acks", &raftqv1.QueuePolicy{VisibilityTimeoutMs: 60_000})
	ctx := ctxT(t, 2*time.Minute)
	group := ""
	for g := 0; group == ""; g++ {
		if wire.ShardFor("acks", fmt.Sprintf("g%d", g), 4) == 0 {
			group = fmt.Sprintf("g%d", g)
		}
	}
	leader := shardLeader(t, c, 0, 0)
	sent, err := msgs(c, leader).Send(ctx, &raftqv1.SendRequest{Queue: "acks", Body: []byte("job"), GroupId: group})
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	got, err := msgs(c, leader).Receive(ctx, &raftqv1.ReceiveRequest{Queue: "acks", MaxMessages: 1, WaitMs: 5000})
	if err != nil || len(got.GetMessages()) != 1 || got.GetMessages()[0].GetMessageId() != sent.GetMessageId() {
		t.Fatalf("receive: %v %v", err, got)
	}
	receipt := got.GetMessages()[0].GetReceipt()
	first, err := msgs(c, leader).Ack(ctx, &raftqv1.AckRequest{Receipts: []string{receipt}})
	if err != nil || first.GetResults()[0].GetCode() != 0 {
		t.Fatalf("first ack: %v %v", err, first)
	}
	c.Kill(leader) // the consumer never saw the answer above

	other := (leader + 1) % len(c.Nodes)
	for {
		resp, err := msgs(c, other).Ack(ctx, &raftqv1.AckRequest{Receipts: []string{receipt}})
		if err == nil && codes.Code(resp.GetResults()[0].GetCode()) == codes.Unavailable {
			// Forwarded to the dead leader or during the election: an
			// unknown outcome, retried as a client would.
			err = status.Error(codes.Unavailable, resp.GetResults()[0].GetError())
		}
		if err == nil {
			r := resp.GetResults()[0]
			if r.GetCode() != 0 || !r.GetAlreadyAcked() {
				t.Fatalf("retried ack = code %d %q already_acked=%v, want OK already_acked", r.GetCode(), r.GetError(), r.GetAlreadyAcked())
			}
			break
		}
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			t.Fatalf("retried ack: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // the shard is electing a leader
	}
	info, err := msgs(c, other).GetMessage(ctx, &raftqv1.GetMessageRequest{MessageId: sent.GetMessageId()})
	if err != nil || info.GetMessage().GetState() != raftqv1.State_STATE_ACKED {
		t.Fatalf("message after the retried ack: %v %v, want ACKED", err, info.GetMessage().GetState())
	}
}
