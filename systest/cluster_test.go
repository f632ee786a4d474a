package systest

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/internal/testcluster"
	"github.com/raftq/raftq/peer/peerpb"
	"github.com/raftq/raftq/wire"
)

func TestCluster_SendReceiveAckThroughDifferentNodes(t *testing.T) {
	c := startCluster(t, testcluster.Options{})
	mustCreateQueue(t, c, "jobs", &raftqv1.QueuePolicy{VisibilityTimeoutMs: 5000})
	ctx := ctxT(t, 30*time.Second)

	sent, err := msgs(c, 1).Send(ctx, &raftqv1.SendRequest{Queue: "jobs", Body: []byte("hello")})
	if err != nil {
		t.Fatalf("send via n2: %v", err)
	}
	if _, err := wire.ParseMessageID(sent.GetMessageId()); err != nil {
		t.Fatalf("send returned a malformed id %q: %v", sent.GetMessageId(), err)
	}
	got, err := msgs(c, 2).Receive(ctx, &raftqv1.ReceiveRequest{Queue: "jobs", MaxMessages: 10, WaitMs: 5000})
	if err != nil || len(got.GetMessages()) != 1 {
		t.Fatalf("receive via n3: %v, %d messages", err, len(got.GetMessages()))
	}
	m := got.GetMessages()[0]
	if m.GetMessageId() != sent.GetMessageId() || string(m.GetBody()) != "hello" || m.GetReceiveCount() != 1 {
		t.Fatalf("received %+v, want the sent message once", m)
	}
	ack, err := msgs(c, 0).Ack(ctx, &raftqv1.AckRequest{Receipts: []string{m.GetReceipt()}})
	if err != nil || ack.GetResults()[0].GetCode() != 0 {
		t.Fatalf("ack via n1: %v %v", err, ack)
	}
	// A second ack with the same receipt repeats the first: success,
	// marked already_acked. A nack of it is refused: the message is done.
	ack, err = msgs(c, 1).Ack(ctx, &raftqv1.AckRequest{Receipts: []string{m.GetReceipt()}})
	if err != nil || ack.GetResults()[0].GetCode() != 0 || !ack.GetResults()[0].GetAlreadyAcked() {
		t.Fatalf("re-ack: %v %v, want OK already_acked", err, ack)
	}
	_, err = msgs(c, 2).Nack(ctx, &raftqv1.NackRequest{Receipt: m.GetReceipt()})
	if st, _ := status.FromError(err); st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), "message "+sent.GetMessageId()+": ") || !strings.Contains(st.Message(), "already acked") {
		t.Fatalf("nack after ack: %v, want FailedPrecondition naming message %s as already acked", err, sent.GetMessageId())
	}
	info, err := msgs(c, 2).GetMessage(ctx, &raftqv1.GetMessageRequest{MessageId: sent.GetMessageId()})
	if err != nil || info.GetMessage().GetState() != raftqv1.State_STATE_ACKED {
		t.Fatalf("get message: %v state %v, want ACKED", err, info.GetMessage().GetState())
	}
	st, err := queues(c, 1).QueueStats(ctx, &raftqv1.QueueStatsRequest{Name: "jobs"})
	if err != nil || st.GetReady()+st.GetInFlight()+st.GetDelayed()+st.GetDead() != 0 {
		t.Fatalf("stats after ack: %v %+v, want empty", err, st)
	}
}

func TestCluster_BadInputGetsClearStatus(t *testing.T) {
	c := startCluster(t, testcluster.Options{})
	mustCreateQueue(t, c, "strict", &raftqv1.QueuePolicy{Mode: raftqv1.QueueMode_QUEUE_MODE_FIFO})
	ctx := ctxT(t, 30*time.Second)
	cases := []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"unknown queue", func() error {
			_, err := msgs(c, 0).Send(ctx, &raftqv1.SendRequest{Queue: "nope", Body: []byte("x")})
			return err
		}, codes.NotFound},
		{"bad queue name", func() error {
			_, err := queues(c, 1).CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "bad name!"})
			return err
		}, codes.InvalidArgument},
		{"oversize body", func() error {
			_, err := msgs(c, 0).Send(ctx, &raftqv1.SendRequest{Queue: "strict", GroupId: "g", Body: make([]byte, 256<<10+1)})
			return err
		}, codes.InvalidArgument},
		{"fifo without group", func() error {
			_, err := msgs(c, 0).Send(ctx, &raftqv1.SendRequest{Queue: "strict", Body: []byte("x")})
			return err
		}, codes.InvalidArgument},
		{"priority above 9", func() error {
			_, err := msgs(c, 2).Send(ctx, &raftqv1.SendRequest{Queue: "strict", GroupId: "g", Priority: 10, Body: []byte("x")})
			return err
		}, codes.InvalidArgument},
		{"garbage receipt", func() error {
			_, err := msgs(c, 0).Nack(ctx, &raftqv1.NackRequest{Receipt: "not-a-receipt"})
			return err
		}, codes.InvalidArgument},
		{"wait above 20s", func() error {
			_, err := msgs(c, 0).Receive(ctx, &raftqv1.ReceiveRequest{Queue: "strict", WaitMs: 20001})
			return err
		}, codes.InvalidArgument},
		{"receive batch above limit", func() error {
			_, err := msgs(c, 0).Receive(ctx, &raftqv1.ReceiveRequest{Queue: "strict", MaxMessages: 100000})
			return err
		}, codes.InvalidArgument},
		{"unknown message", func() error {
			_, err := msgs(c, 1).GetMessage(ctx, &raftqv1.GetMessageRequest{MessageId: "0-fffff"})
			return err
		}, codes.NotFound},
		{"byte capacity below the body limit", func() error {
			_, err := queues(c, 1).CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "tiny", Policy: &raftqv1.QueuePolicy{MaxBytesPerShard: 1024}})
			return err
		}, codes.InvalidArgument},
		{"create with conflicting policy", func() error {
			_, err := queues(c, 2).CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "strict", Policy: &raftqv1.QueuePolicy{Mode: raftqv1.QueueMode_QUEUE_MODE_STANDARD}})
			return err
		}, codes.AlreadyExists},
	}
	for _, tc := range cases {
		if err := tc.call(); status.Code(err) != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
	st, err := queues(c, 0).QueueStats(ctx, &raftqv1.QueueStatsRequest{Name: "strict"})
	if err != nil || st.GetReady() != 0 {
		t.Fatalf("bad input changed state: %v %+v", err, st)
	}
}

func TestCluster_FIFOOrderPerGroupAcrossNodes(t *testing.T) {
	c := startCluster(t, testcluster.Options{})
	mustCreateQueue(t, c, "fifo", &raftqv1.QueuePolicy{Mode: raftqv1.QueueMode_QUEUE_MODE_FIFO, VisibilityTimeoutMs: 10000})
	ctx := ctxT(t, 60*time.Second)
	const groups, per = 6, 30
	var wg sync.WaitGroup
	for g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range per {
				body := fmt.Sprintf("g%d:%03d", g, k)
				_, err := msgs(c, (g+k)%3).Send(ctx, &raftqv1.SendRequest{Queue: "fifo", GroupId: "g" + strconv.Itoa(g), Body: []byte(body), DedupKey: body})
				if err != nil {
					t.Errorf("send %s: %v", body, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	// Three consumers on three nodes; each records what it got per group.
	var mu sync.Mutex
	seen := map[string][]int{}
	var total atomic.Int64
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for total.Load() < groups*per && ctx.Err() == nil {
				resp, err := msgs(c, i).Receive(ctx, &raftqv1.ReceiveRequest{Queue: "fifo", MaxMessages: 5, WaitMs: 300})
				if err != nil {
					t.Errorf("receive: %v", err)
					return
				}
				for _, m := range resp.GetMessages() {
					g, k, _ := strings.Cut(string(m.GetBody()), ":")
					n, _ := strconv.Atoi(k)
					mu.Lock()
					seen[g] = append(seen[g], n)
					mu.Unlock()
					if _, err := msgs(c, (i+1)%3).Ack(ctx, &raftqv1.AckRequest{Receipts: []string{m.GetReceipt()}}); err != nil {
						t.Errorf("ack: %v", err)
						return
					}
					total.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if len(seen) != groups {
		t.Fatalf("saw %d groups, want %d", len(seen), groups)
	}
	for g, order := range seen {
		if len(order) != per || !sort.IntsAreSorted(order) {
			t.Fatalf("group %s delivered out of order or incomplete: %v", g, order)
		}
	}
}

func TestCluster_LongPollWakesOnSend(t *testing.T) {
	c := startCluster(t, testcluster.Options{})
	mustCreateQueue(t, c, "wake", nil)
	ctx := ctxT(t, 30*time.Second)
	type result struct {
		n       int
		elapsed time.Duration
		err     error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		resp, err := msgs(c, 2).Receive(ctx, &raftqv1.ReceiveRequest{Queue: "wake", WaitMs: 20000})
		done <- result{len(resp.GetMessages()), time.Since(start), err}
	}()
	time.Sleep(700 * time.Millisecond)
	if _, err := msgs(c, 0).Send(ctx, &raftqv1.SendRequest{Queue: "wake", Body: []byte("ping")}); err != nil {
		t.Fatalf("send: %v", err)
	}
	r := <-done
	if r.err != nil || r.n != 1 {
		t.Fatalf("long poll: %v, %d messages", r.err, r.n)
	}
	// Woken by the send, not by the 20 s wait (the API's maximum) running
	// out: a wake takes about a second after the send; 10 s leaves room for
	// a loaded machine.
	if r.elapsed > 10*time.Second {
		t.Fatalf("long poll returned after %v: not woken by the send", r.elapsed)
	}
}

func TestCluster_KillLeaderUnderLoadLosesNothing(t *testing.T) {
	c := startCluster(t, testcluster.Options{})
	mustCreateQueue(t, c, "load", &raftqv1.QueuePolicy{VisibilityTimeoutMs: 5000})
	ctx := ctxT(t, 3*time.Minute)
	victim := shardLeader(t, c, 0, 0)
	alive := func(i int) bool { return i != victim }

	var mu sync.Mutex
	acked := map[string]bool{} // body -> acknowledged by the cluster
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for p := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				body := fmt.Sprintf("p%d-%d", p, k)
				// Retry until acknowledged, with a dedup key so retries of an
				// indeterminate send cannot duplicate it.
				for attempt := 0; ; attempt++ {
					node := (p + k + attempt) % 3
					if !alive(node) {
						continue
					}
					_, err := msgs(c, node).Send(ctx, &raftqv1.SendRequest{Queue: "load", Body: []byte(body), DedupKey: body, GroupId: strconv.Itoa(k % 16)})
					if err == nil {
						mu.Lock()
						acked[body] = true
						mu.Unlock()
						break
					}
					if ctx.Err() != nil {
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	time.Sleep(1500 * time.Millisecond)
	c.Kill(victim)
	killedAt := time.Now()
	// Time until shard 0 (the victim led it) commits again, seen by a client.
	g0 := ""
	for g := 0; g0 == ""; g++ {
		if wire.ShardFor("load", "probe"+strconv.Itoa(g), 4) == 0 {
			g0 = "probe" + strconv.Itoa(g)
		}
	}
	for {
		_, err := msgs(c, (victim+1)%3).Send(ctx, &raftqv1.SendRequest{Queue: "load", Body: []byte("probe"), GroupId: g0, DedupKey: "probe"})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("shard 0 never served again after the kill: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	recovered := time.Since(killedAt)
	t.Logf("shard 0 served again %v after kill -9 of its leader", recovered.Round(time.Millisecond))
	// An election and a client retry take a few seconds; 30 s leaves room
	// for a loaded machine (a shard that never serves again fails above).
	if recovered > 30*time.Second {
		t.Errorf("shard 0 took %v to serve again after its leader died", recovered)
	}
	mu.Lock()
	acked["probe"] = true
	mu.Unlock()
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	t.Logf("acknowledged %d sends; killed n%d at %v", len(acked), victim+1, killedAt.Format(time.StampMilli))

	reader := (victim + 1) % 3
	got := drain(t, c, reader, "load", 3)
	seen := map[string]int{}
	for _, b := range got {
		seen[b]++
	}
	for b := range acked {
		if seen[b] == 0 {
			t.Errorf("acknowledged send %s lost", b)
		}
	}
	for b, n := range seen {
		if n > 1 {
			t.Errorf("message %s delivered %d times although every delivery was acked", b, n)
		}
	}
	// The killed node restarts from its data and catches up.
	c.Restart(victim)
	if err := c.WaitServing(ctx, victim); err != nil {
		t.Fatalf("restart: %v", err)
	}
	waitCaughtUp(t, c, victim)
	waitSameDigests(t, c, 4)
}

// waitSameDigests waits until, for every shard, all nodes report the same
// FSM digest at the same applied index: the replicas hold identical state.
// Leader ticks may move the index meanwhile, so it retries until a quiet
// moment (the queue is drained, so ticks stop).
func waitSameDigests(t *testing.T, c *testcluster.Cluster, shards uint32) {
	t.Helper()
	ctx := ctxT(t, 60*time.Second)
	for id := uint32(0); id < shards; id++ {
		for {
			var first *peerpb.ShardDigestResponse
			same := true
			for i := range c.Nodes {
				d, err := peerpb.NewPeerClient(c.PeerConn(i)).ShardDigest(ctx, &peerpb.ShardDigestRequest{ShardId: id})
				if err != nil {
					t.Fatalf("digest of shard %d on n%d: %v", id, i+1, err)
				}
				if first == nil {
					first = d
					continue
				}
				if d.GetAppliedIndex() != first.GetAppliedIndex() || string(d.GetDigest()) != string(first.GetDigest()) {
					same = false
					if d.GetAppliedIndex() == first.GetAppliedIndex() {
						t.Fatalf("shard %d: replicas differ at applied index %d: %x vs %x", id, d.GetAppliedIndex(), d.GetDigest(), first.GetDigest())
					}
				}
			}
			if same {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("shard %d replicas never reached the same applied index", id)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// waitCaughtUp waits until node i has applied, on every shard it hosts,
// at least the commit index the leader reported when the wait began.
func waitCaughtUp(t *testing.T, c *testcluster.Cluster, i int) {
	t.Helper()
	ctx := ctxT(t, 60*time.Second)
	target := map[uint32]uint64{}
	other := (i + 1) % len(c.Nodes)
	st, err := raftqv1.NewClusterClient(c.Conn(other)).Status(ctx, &raftqv1.StatusRequest{})
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	for _, s := range st.GetShards() {
		target[s.GetShardId()] = s.GetCommitIndex()
	}
	for {
		st, err := raftqv1.NewClusterClient(c.Conn(i)).Status(ctx, &raftqv1.StatusRequest{})
		behind := 0
		if err == nil {
			for _, s := range st.GetShards() {
				if s.GetAppliedIndex() < target[s.GetShardId()] {
					behind++
				}
			}
			if behind == 0 {
				return
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("node %d did not catch up: %v, %d shards behind", i, err, behind)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// A queue exists everywhere as soon as CreateQueue returns: a follower of
// the meta group has not applied the create yet (it learns the commit with
// the leader's next append), so it must ask the leader before it answers
// NotFound. Each round creates through another node and reads through all
// three at once.
func TestCluster_QueueVisibleOnEveryNodeOnceCreated(t *testing.T) {
	c := startCluster(t, testcluster.Options{})
	ctx := ctxT(t, time.Minute)
	for round := range 9 {
		q := fmt.Sprintf("visible%d", round)
		mustCreateQueueVia(t, c, round%3, q)
		for i := range 3 {
			if _, err := queues(c, i).GetQueue(ctx, &raftqv1.GetQueueRequest{Name: q}); err != nil {
				t.Fatalf("round %d: GetQueue %s on node %d right after create: %v", round, q, i, err)
			}
			if _, err := queues(c, i).QueueStats(ctx, &raftqv1.QueueStatsRequest{Name: q}); err != nil {
				t.Fatalf("round %d: QueueStats %s on node %d right after create: %v", round, q, i, err)
			}
		}
	}
	// NotFound still means not found, on the leader and followers alike.
	for i := range 3 {
		_, err := queues(c, i).GetQueue(ctx, &raftqv1.GetQueueRequest{Name: "never-created"})
		if status.Code(err) != codes.NotFound {
			t.Fatalf("GetQueue of a queue nobody created on node %d: %v, want NotFound", i, err)
		}
	}
}
