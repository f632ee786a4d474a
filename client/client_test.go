package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/client/clienttest"
	"github.com/raftq/raftq/wire"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustDial(t *testing.T, seeds []string, opts ...Option) *Client {
	t.Helper()
	c, err := Dial(testCtx(t), seeds, opts...)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func mustCreate(t *testing.T, c *Client, name string, o QueueOptions) {
	t.Helper()
	if _, err := c.CreateQueue(testCtx(t), name, o); err != nil {
		t.Fatalf("CreateQueue(%q): %v", name, err)
	}
}

func mustSend(t *testing.T, c *Client, queue, body string, opts ...SendOption) SendResult {
	t.Helper()
	r, err := c.Send(testCtx(t), queue, []byte(body), opts...)
	if err != nil {
		t.Fatalf("Send(%q): %v", body, err)
	}
	return r
}

func mustReceive(t *testing.T, c *Client, queue string, n int) []*Message {
	t.Helper()
	ms, err := c.Receive(testCtx(t), queue, ReceiveOptions{Max: n, Wait: 2 * time.Second})
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	return ms
}

func fastRetry(attempts int) Option {
	return WithRetry(RetryPolicy{MaxAttempts: attempts, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond})
}

func TestDialRejectsNoSeedsAndDeadCluster(t *testing.T) {
	if _, err := Dial(testCtx(t), []string{" ", ""}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Dial without seeds = %v, want ErrInvalid", err)
	}
	s := clienttest.NewServer(t)
	s.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := Dial(ctx, []string{s.Addr}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Dial to a stopped node = %v, want ErrUnavailable", err)
	}
}

func TestQueueLifecycle(t *testing.T) {
	s := clienttest.NewServer(t)
	c := mustDial(t, []string{s.Addr})
	ctx := testCtx(t)
	opts := QueueOptions{FIFO: true, Visibility: 45 * time.Second, MaxReceives: 3, DedupWindow: time.Minute}
	info, err := c.CreateQueue(ctx, "orders", opts)
	if err != nil || info.Name != "orders" || info.Options != opts || info.Created.IsZero() {
		t.Fatalf("CreateQueue = %+v, %v", info, err)
	}
	if _, err := c.CreateQueue(ctx, "orders", QueueOptions{}); !errors.Is(err, ErrExists) {
		t.Fatalf("CreateQueue with another policy = %v, want ErrExists", err)
	}
	if got, err := c.GetQueue(ctx, "orders"); err != nil || got.Options != opts {
		t.Fatalf("GetQueue = %+v, %v", got, err)
	}
	if _, err := c.GetQueue(ctx, "nope"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `queue "nope" not found`) {
		t.Fatalf("GetQueue(nope) = %v, want ErrNotFound with the server message", err)
	}
	opts.MaxReceives = 7
	if got, err := c.UpdateQueue(ctx, "orders", opts); err != nil || got.Options.MaxReceives != 7 {
		t.Fatalf("UpdateQueue = %+v, %v", got, err)
	}
	mustSend(t, c, "orders", "a", Group("g"))
	mustSend(t, c, "orders", "b", Group("g"), Delay(time.Hour))
	st, err := c.Stats(ctx, "orders")
	if err != nil || st.Ready != 1 || st.Delayed != 1 || st.Moves["sent"] != 2 || len(st.Moves) != 1 {
		t.Fatalf("Stats = %+v, %v", st, err)
	}
	if n, err := c.PurgeQueue(ctx, "orders"); err != nil || n != 2 {
		t.Fatalf("PurgeQueue = %d, %v", n, err)
	}
	qs, err := c.ListQueues(ctx)
	if err != nil || len(qs) != 1 || qs[0].Name != "orders" {
		t.Fatalf("ListQueues = %+v, %v", qs, err)
	}
	if err := c.DeleteQueue(ctx, "orders"); err != nil {
		t.Fatalf("DeleteQueue: %v", err)
	}
	if err := c.DeleteQueue(ctx, "orders"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second DeleteQueue = %v, want ErrNotFound", err)
	}
}

func TestSendReceiveAckNackExtend(t *testing.T) {
	s := clienttest.NewServer(t)
	c := mustDial(t, []string{s.Addr})
	ctx := testCtx(t)
	mustCreate(t, c, "jobs", QueueOptions{})
	sent := mustSend(t, c, "jobs", "hello", Attributes(map[string]string{"k": "v"}), Type("email"), Priority(5))
	if _, err := wire.ParseMessageID(sent.ID); err != nil || sent.Deduplicated {
		t.Fatalf("Send result %+v: %v", sent, err)
	}
	again := mustSend(t, c, "jobs", "x", DedupKey("k1"))
	dup := mustSend(t, c, "jobs", "y", DedupKey("k1"))
	if !dup.Deduplicated || dup.ID != again.ID {
		t.Fatalf("dedup: first %+v, second %+v", again, dup)
	}
	ms := mustReceive(t, c, "jobs", 10)
	if len(ms) != 2 {
		t.Fatalf("received %d messages, want 2", len(ms))
	}
	m := ms[0] // priority 5 first
	if string(m.Body) != "hello" || m.Type != "email" || m.Attributes["k"] != "v" || m.ReceiveCount != 1 || m.LeaseEpoch == 0 || m.ID != sent.ID {
		t.Fatalf("received %+v", m)
	}
	dl, err := c.Extend(ctx, m.Receipt, time.Minute)
	if err != nil || time.Until(dl) < 50*time.Second {
		t.Fatalf("Extend = %v, %v", dl, err)
	}
	// A batch with one bad item cannot pass for a success: the error is
	// not nil, and says which item failed.
	err = c.AckBatch(ctx, []string{m.Receipt, "garbage", m.Receipt})
	var be *BatchError
	if !errors.As(err, &be) || !errors.Is(err, ErrInvalid) || be.Failed() != 1 {
		t.Fatalf("AckBatch = %v, want a BatchError with one ErrInvalid item", err)
	}
	// The second ack of one receipt is a repeat of the first: success.
	if be.Errs[0] != nil || !errors.Is(be.Errs[1], ErrInvalid) || be.Errs[2] != nil {
		t.Fatalf("AckBatch item errors = %v", be.Errs)
	}
	if err := c.Ack(ctx, m.Receipt); err != nil {
		t.Fatalf("Ack of an acked receipt again = %v, want nil", err)
	}
	if err := c.Ack(ctx, "garbage"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Ack of a malformed receipt = %v, want ErrInvalid", err)
	}
	if _, err := c.Extend(ctx, m.Receipt, time.Minute); !errors.Is(err, ErrStaleReceipt) {
		t.Fatalf("Extend after ack = %v, want ErrStaleReceipt", err)
	}
	if err := c.Nack(ctx, ms[1].Receipt, NackOptions{ReadyNow: true, Error: "boom"}); err != nil {
		t.Fatalf("Nack: %v", err)
	}
	back := mustReceive(t, c, "jobs", 1)
	if len(back) != 1 || back[0].ID != ms[1].ID || back[0].ReceiveCount != 2 || back[0].LastError != "boom" || back[0].LeaseEpoch <= ms[1].LeaseEpoch {
		t.Fatalf("after nack received %+v", back)
	}
	if err := c.DeadLetter(ctx, back[0].Receipt, "poison"); err != nil {
		t.Fatalf("DeadLetter: %v", err)
	}
	info, err := c.GetMessage(ctx, back[0].ID)
	if err != nil || info.State != "dead" || info.DeadReason != "poison" || info.LastError != "poison" || len(info.History) != 2 || info.History[1].Outcome != "poison" {
		t.Fatalf("GetMessage = %+v, %v", info, err)
	}
	if info.History[0].Outcome != "nacked" || info.History[0].Error != "boom" {
		t.Fatalf("history = %+v", info.History)
	}
	dead, err := c.ListDead(ctx, "jobs", 0)
	if err != nil || len(dead) != 1 || dead[0].ID != back[0].ID {
		t.Fatalf("ListDead = %v, %v", dead, err)
	}
	if n, err := c.Redrive(ctx, "jobs", RedriveOptions{IDs: []string{back[0].ID}, Rate: 10}); err != nil || n != 1 {
		t.Fatalf("Redrive = %d, %v", n, err)
	}
	if _, err := c.Redrive(ctx, "jobs", RedriveOptions{Rate: 501}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Redrive rate 501 = %v, want ErrInvalid", err)
	}
	if n, err := c.Discard(ctx, "jobs"); err != nil || n != 0 {
		t.Fatalf("Discard = %d, %v", n, err)
	}
	if err := c.Cancel(ctx, back[0].ID); err != nil {
		t.Fatalf("Cancel of a ready message: %v", err)
	}
	if _, err := c.GetMessage(ctx, back[0].ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetMessage after cancel = %v, want ErrNotFound", err)
	}
}

func TestClientSideValidation(t *testing.T) {
	s := clienttest.NewServer(t)
	c := mustDial(t, []string{s.Addr})
	ctx := testCtx(t)
	rcpt := wire.Receipt{Shard: 0, ID: 1, Epoch: 1}.String()
	for name, err := range map[string]error{
		"nack bad receipt":       c.Nack(ctx, "nope", NackOptions{}),
		"nack negative delay":    c.Nack(ctx, rcpt, NackOptions{Delay: -time.Second}),
		"nack delay past max":    c.Nack(ctx, rcpt, NackOptions{Delay: MaxDelay + time.Millisecond}),
		"nack delay and now":     c.Nack(ctx, rcpt, NackOptions{Delay: time.Second, ReadyNow: true}),
		"extend past max":        func() error { _, err := c.Extend(ctx, rcpt, MaxVisibility+time.Second); return err }(),
		"receive visibility max": func() error { _, err := c.Receive(ctx, "q", ReceiveOptions{Visibility: 13 * time.Hour}); return err }(),
		"send delay past max":    func() error { _, err := c.Send(ctx, "q", nil, Delay(MaxDelay+time.Second)); return err }(),
		"dead bad receipt":       c.DeadLetter(ctx, "", "x"),
		"cancel bad id":          c.Cancel(ctx, "zz"),
		"extend zero":            func() error { _, err := c.Extend(ctx, wire.Receipt{ID: 1, Epoch: 1}.String(), 0); return err }(),
		"receive max":            func() error { _, err := c.Receive(ctx, "q", ReceiveOptions{Max: 1001}); return err }(),
		"receive wait":           func() error { _, err := c.Receive(ctx, "q", ReceiveOptions{Wait: 21 * time.Second}); return err }(),
		"send delay":             func() error { _, err := c.Send(ctx, "q", nil, Delay(-time.Second)); return err }(),
		"get bad id":             func() error { _, err := c.GetMessage(ctx, "1-0"); return err }(),
		"unique for negative":    func() error { _, err := c.Send(ctx, "q", nil, Unique("k", UniqueFor(-time.Second))); return err }(),
		"unique for past max": func() error {
			_, err := c.Send(ctx, "q", nil, Unique("k", UniqueFor(MaxRetention+time.Second)))
			return err
		}(),
		"unique without key": func() error { _, err := c.Send(ctx, "q", nil, Unique("", UniqueUntilDone())); return err }(),
	} {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if calls := s.Calls(""); len(calls) != 1 || calls[0].Method != "ShardMap" {
		t.Fatalf("invalid input reached the server: %+v", calls)
	}
}

func TestSendBatchPerItemResults(t *testing.T) {
	s := clienttest.NewServer(t)
	c := mustDial(t, []string{s.Addr})
	mustCreate(t, c, "b", QueueOptions{})
	items := []Outgoing{{Body: []byte("1")}, {Body: []byte("2"), Priority: 10}, {Body: []byte("3"), DedupKey: "d"}}
	// One invalid item makes the error non-nil, so `_, err :=` cannot miss
	// it; the results still say which items went through.
	res, err := c.SendBatch(testCtx(t), "b", items)
	var be *BatchError
	if !errors.As(err, &be) || be.Failed() != 1 || !errors.Is(err, ErrInvalid) || len(res) != 3 {
		t.Fatalf("SendBatch = %v, %v; want 3 results and a BatchError with one ErrInvalid item", res, err)
	}
	if res[0].Err != nil || res[0].ID == "" || !errors.Is(res[1].Err, ErrInvalid) || res[2].Err != nil {
		t.Fatalf("SendBatch results = %+v", res)
	}
	if items[0].DedupKey != "" {
		t.Fatal("SendBatch modified the caller's items")
	}
}

// twoNodes starts two fake nodes, A leading shard 0 and B leading shard 1,
// each holding the messages of the shard it leads.
func twoNodes(t *testing.T) (a, b *clienttest.Server) {
	a, b = clienttest.NewServer(t), clienttest.NewServer(t)
	a.SetShardMap(0, a.Addr, b.Addr)
	b.SetShardMap(1, a.Addr, b.Addr)
	return a, b
}

// groupOn finds a group that hashes to shard of 2.
func groupOn(queue string, shard uint32) string {
	for i := 0; ; i++ {
		if g := fmt.Sprintf("g%d", i); wire.ShardFor(queue, g, 2) == shard {
			return g
		}
	}
}

func TestRoutingToShardLeaders(t *testing.T) {
	a, b := twoNodes(t)
	c := mustDial(t, []string{a.Addr})
	if c.ShardCount() != 2 {
		t.Fatalf("ShardCount = %d", c.ShardCount())
	}
	ctx := testCtx(t)
	createOn(t, "q", a, b)
	// Sends are coalesced (WithSendCoalescing), so each leaves as SendBatch.
	before := len(a.Calls("SendBatch"))
	for range 4 {
		r := mustSend(t, c, "q", "x", Group(groupOn("q", 1)))
		if id, _ := wire.ParseMessageID(r.ID); id.Shard != 1 {
			t.Fatalf("grouped send for shard 1 answered by shard %d", id.Shard)
		}
	}
	if got := len(a.Calls("SendBatch")) - before; got != 0 {
		t.Fatalf("node A got %d sends meant for shard 1's leader", got)
	}
	if n := len(b.Calls("SendBatch")); n != 4 {
		t.Fatalf("node B got %d sends, want 4", n)
	}
	// A receipt of shard 1 is acked at B even though the client dialled A.
	got := mustReceiveFrom(t, b, 1)
	if err := c.AckBatch(ctx, got); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	if n := len(b.Calls("Ack")); n != 1 {
		t.Fatalf("node B saw %d acks, want 1", n)
	}
	if n := len(a.Calls("Ack")); n != 0 {
		t.Fatalf("node A saw %d acks for shard 1", n)
	}
}

// Receives go to shard leaders, where the router asks the shards it
// leads first, not round robin over every node: on a one-shard cluster a
// follower would forward both the long poll and the lease to the leader.
func TestReceiveGoesToShardLeaders(t *testing.T) {
	follower, leader := clienttest.NewServer(t), clienttest.NewServer(t)
	follower.SetShardMap(0, leader.Addr)
	leader.SetShardMap(0, leader.Addr)
	c := mustDial(t, []string{follower.Addr})
	createOn(t, "q", follower, leader)
	for range 4 {
		mustSend(t, c, "q", "x")
	}
	ctx := testCtx(t)
	for i := range 4 {
		ms, err := c.Receive(ctx, "q", ReceiveOptions{Max: 1})
		if err != nil || len(ms) != 1 {
			t.Fatalf("Receive %d = %d messages, %v", i, len(ms), err)
		}
	}
	if n := len(follower.Calls("Receive")); n != 0 {
		t.Fatalf("the follower took %d of 4 receives", n)
	}
	if n := len(leader.Calls("Receive")); n != 4 {
		t.Fatalf("the leader took %d of 4 receives", n)
	}

	// With two shards led by two nodes, receives take turns between them.
	a, b := twoNodes(t)
	c2 := mustDial(t, []string{a.Addr})
	createOn(t, "q", a, b)
	for i := range 4 {
		if _, err := c2.Receive(ctx, "q", ReceiveOptions{Max: 1}); err != nil {
			t.Fatalf("Receive %d: %v", i, err)
		}
	}
	if na, nb := len(a.Calls("Receive")), len(b.Calls("Receive")); na != 2 || nb != 2 {
		t.Fatalf("receives at the two leaders: %d and %d, want 2 and 2", na, nb)
	}
}

// A shard without a known leader does not stop receives: they go to any
// node, whose router finds the messages.
func TestReceiveWithoutKnownLeaderUsesAnyNode(t *testing.T) {
	s := clienttest.NewServer(t)
	s.SetShardMap(0, "")
	c := mustDial(t, []string{s.Addr})
	mustCreate(t, c, "q", QueueOptions{})
	mustSend(t, c, "q", "x")
	ms, err := c.Receive(testCtx(t), "q", ReceiveOptions{Max: 1})
	if err != nil || len(ms) != 1 {
		t.Fatalf("Receive = %d messages, %v", len(ms), err)
	}
}

// createOn creates queue on each fake node (fakes do not share a meta group).
func createOn(t *testing.T, queue string, nodes ...*clienttest.Server) {
	t.Helper()
	for _, s := range nodes {
		cs := mustDial(t, []string{s.Addr})
		cs.smap.Store(&shardMap{nodes: []string{s.Addr}}) // pin to s
		mustCreate(t, cs, queue, QueueOptions{})
	}
}

// mustReceiveFrom leases n messages of queue q directly at node s.
func mustReceiveFrom(t *testing.T, s *clienttest.Server, n int) []string {
	t.Helper()
	cs := mustDial(t, []string{s.Addr})
	cs.smap.Store(&shardMap{nodes: []string{s.Addr}}) // pin to s
	ms, err := cs.Receive(testCtx(t), "q", ReceiveOptions{Max: n})
	if err != nil || len(ms) != n {
		t.Fatalf("Receive at %s = %d, %v", s.Addr, len(ms), err)
	}
	var out []string
	for _, m := range ms {
		out = append(out, m.Receipt)
	}
	return out
}

// staleMap starts two nodes, each leading one shard, and a client dialled
// through A whose map says A leads both: what a client holds after shard
// 1's leader moved to B. Queue "q" exists on both.
func staleMap(t *testing.T) (a, b *clienttest.Server, c *Client) {
	t.Helper()
	a, b = twoNodes(t)
	a.SetShardMap(0, a.Addr, a.Addr)
	c = mustDial(t, []string{a.Addr}, fastRetry(5))
	createOn(t, "q", a, b)
	return a, b, c
}

func TestLeaderHintRedirects(t *testing.T) {
	a, b, c := staleMap(t)
	a.Refuse("SendBatch", 1, "nodeB="+b.Addr)
	r := mustSend(t, c, "q", "x", Group(groupOn("q", 1)))
	if id, _ := wire.ParseMessageID(r.ID); id.Shard != 1 {
		t.Fatalf("send after hint landed on shard %d", id.Shard)
	}
	if got := c.smap.Load().leader(1); got != b.Addr {
		t.Fatalf("leader of shard 1 after hint = %q, want %q", got, b.Addr)
	}
	// The learned leader is used directly next time.
	mustSend(t, c, "q", "y", Group(groupOn("q", 1)))
	if n := len(a.Calls("SendBatch")); n != 1 {
		t.Fatalf("node A saw %d sends, want only the one it redirected", n)
	}
}

// A node that forwarded a call to a shard's leader names it in a trailer;
// the client then calls that leader directly. Without this, a client whose
// cached leader handed its shard on kept every call going through it.
func TestForwardedCallTeachesTheLeader(t *testing.T) {
	// A, still up and forwarding, would never correct the map by refusing.
	a, b, c := staleMap(t)
	a.Forward("SendBatch", 1, "1:nodeB="+b.Addr)
	mustSend(t, c, "q", "x", Group(groupOn("q", 1)))
	if got := c.smap.Load().leader(1); got != b.Addr {
		t.Fatalf("leader of shard 1 after a forwarded send = %q, want %q", got, b.Addr)
	}
	mustSend(t, c, "q", "y", Group(groupOn("q", 1)))
	if na, nb := len(a.Calls("SendBatch")), len(b.Calls("SendBatch")); na != 1 || nb != 1 {
		t.Fatalf("SendBatch calls: A %d, B %d; want the first at A and the next at B", na, nb)
	}
	if got := c.smap.Load().leader(0); got != a.Addr {
		t.Fatalf("leader of shard 0 = %q, want %q untouched", got, a.Addr)
	}
}

// Trailer values that do not name a shard and a well-formed leader change
// nothing.
func TestLearnLeadersIgnoresMalformedValues(t *testing.T) {
	a, b := twoNodes(t)
	c := mustDial(t, []string{a.Addr})
	before := c.smap.Load()
	c.learnLeaders(metadata.Pairs(ShardLeaderTrailer, "nodeB="+b.Addr,
		ShardLeaderTrailer, "x:nodeB="+b.Addr, ShardLeaderTrailer, "1:"+b.Addr,
		ShardLeaderTrailer, "1:nodeB=", ShardLeaderTrailer, "7:nodeB="+b.Addr))
	if c.smap.Load() != before {
		t.Fatalf("shard map changed: leaders %v, want %v", c.smap.Load().leaders, before.leaders)
	}
	c.learnLeaders(metadata.Pairs(ShardLeaderTrailer, "0:nodeB="+b.Addr))
	if got := c.smap.Load().leader(0); got != b.Addr {
		t.Fatalf("leader of shard 0 = %q after a valid value, want %q", got, b.Addr)
	}
}

func TestRetryRules(t *testing.T) {
	for _, c := range []struct {
		name      string
		code      codes.Code
		refuse    bool
		fails     int
		opts      []Option
		sendOpts  []SendOption
		wantErr   error
		wantCalls int
	}{
		{"unknown outcome retried with auto dedup", codes.Unavailable, false, 2, nil, nil, nil, 3},
		{"unknown outcome not retried without dedup key", codes.Unavailable, false, 1, []Option{WithAutoDedup(false)}, nil, ErrUnavailable, 1},
		{"deadline not retried without dedup key", codes.DeadlineExceeded, false, 1, []Option{WithAutoDedup(false)}, nil, context.DeadlineExceeded, 1},
		{"refusal retried without dedup key", codes.Unavailable, true, 2, []Option{WithAutoDedup(false)}, nil, nil, 3},
		{"explicit dedup key retried", codes.Unavailable, false, 1, []Option{WithAutoDedup(false)}, []SendOption{DedupKey("k")}, nil, 2},
		{"budget bounds retries", codes.Unavailable, false, 50, nil, nil, ErrUnavailable, 4},
		{"budget bounds refusals", codes.Unavailable, true, 50, nil, nil, ErrUnavailable, 4},
		{"invalid never retried", codes.InvalidArgument, false, 1, nil, nil, ErrInvalid, 1},
		{"not found never retried", codes.NotFound, false, 1, nil, nil, ErrNotFound, 1},
		{"precondition never retried", codes.FailedPrecondition, false, 1, nil, nil, ErrStaleReceipt, 1},
		{"exists never retried", codes.AlreadyExists, false, 1, nil, nil, ErrExists, 1},
		{"exhausted never retried", codes.ResourceExhausted, false, 1, nil, nil, ErrExhausted, 1},
	} {
		// The same rules hold whether a Send leaves alone or coalesced
		// into a SendBatch call.
		for _, mode := range []struct {
			name, rpc string
			opts      []Option
		}{
			{"coalesced", "SendBatch", nil},
			{"single", "Send", []Option{WithSendCoalescing(0)}},
		} {
			t.Run(c.name+"/"+mode.name, func(t *testing.T) {
				s := clienttest.NewServer(t)
				opts := append(append([]Option{fastRetry(4)}, c.opts...), mode.opts...)
				cl := mustDial(t, []string{s.Addr}, opts...)
				mustCreate(t, cl, "q", QueueOptions{})
				rpc := mode.rpc
				if keyless := c.opts != nil && len(c.sendOpts) == 0; keyless {
					// With AutoDedup off and no key or group the client
					// cannot place the message on a shard: it is never
					// coalesced.
					rpc = "Send"
				}
				if c.refuse {
					s.Refuse(rpc, c.fails, "")
				} else {
					s.Fail(rpc, c.fails, c.code)
				}
				_, err := cl.Send(testCtx(t), "q", []byte("x"), c.sendOpts...)
				if (c.wantErr == nil) != (err == nil) || (c.wantErr != nil && !errors.Is(err, c.wantErr)) {
					t.Fatalf("Send = %v, want %v", err, c.wantErr)
				}
				if n := len(s.Calls(rpc)); n != c.wantCalls {
					t.Fatalf("server saw %d %s calls, want %d", n, rpc, c.wantCalls)
				}
			})
		}
	}
}

func TestRetryStopsAtDeadline(t *testing.T) {
	s := clienttest.NewServer(t)
	// Every backoff (half an hour to an hour) outlasts the caller's
	// deadline, so the client must give up after the first refusal with
	// that refusal: one attempt, answered before the deadline. A client
	// that slept would have the deadline end its sleep (an error of the
	// context, not the refusal); one that ignored it would sleep on.
	c := mustDial(t, []string{s.Addr}, WithRetry(RetryPolicy{MaxAttempts: 100, BaseDelay: time.Hour, MaxDelay: time.Hour}))
	mustCreate(t, c, "q", QueueOptions{})
	s.Fail("SendBatch", 100, codes.Unavailable)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := c.Send(ctx, "q", []byte("x"))
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send = %v, want the refusal (ErrUnavailable)", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Send returned only when the deadline ended: it slept toward a backoff past the deadline")
	}
	if n := len(s.Calls("SendBatch")); n != 1 {
		t.Fatalf("%d attempts, want 1: no backoff fits before the deadline", n)
	}
}

func TestAutoDedupKeyIsSent(t *testing.T) {
	s := clienttest.NewServer(t)
	c := mustDial(t, []string{s.Addr})
	mustCreate(t, c, "q", QueueOptions{})
	a, b := mustSend(t, c, "q", "same"), mustSend(t, c, "q", "same")
	if a.ID == b.ID || a.Deduplicated || b.Deduplicated {
		t.Fatalf("two sends without a key were deduplicated: %+v %+v", a, b)
	}
	info, err := c.GetMessage(testCtx(t), a.ID)
	if err != nil || !strings.HasPrefix(info.DedupKey, "auto-") {
		t.Fatalf("auto dedup key = %q, %v", info.DedupKey, err)
	}
}

func TestAckSplitsByShardAndReportsFailedShard(t *testing.T) {
	a, b := twoNodes(t)
	c := mustDial(t, []string{a.Addr}, fastRetry(2))
	createOn(t, "q", a, b)
	for _, s := range []*clienttest.Server{a, b} {
		cs := mustDial(t, []string{s.Addr})
		cs.smap.Store(&shardMap{nodes: []string{s.Addr}})
		mustSend(t, cs, "q", "x")
	}
	ra, rb := mustReceiveFrom(t, a, 1), mustReceiveFrom(t, b, 1)
	b.Fail("Ack", 10, codes.Unavailable)
	err := c.AckBatch(testCtx(t), []string{rb[0], ra[0]})
	var be *BatchError
	if !errors.Is(err, ErrUnavailable) || !errors.As(err, &be) {
		t.Fatalf("AckBatch error = %v, want a BatchError with ErrUnavailable for shard 1", err)
	}
	if !errors.Is(be.Errs[0], ErrUnavailable) || be.Errs[1] != nil {
		t.Fatalf("item errors = %v", be.Errs)
	}
}

func TestKeyedSendsGoToTheKeysShard(t *testing.T) {
	a, b := twoNodes(t)
	c := mustDial(t, []string{a.Addr})
	createOn(t, "q", a, b)
	ctx := testCtx(t)
	for i := range 20 {
		r := mustSend(t, c, "q", fmt.Sprint(i))
		info, err := c.GetMessage(ctx, r.ID)
		if err != nil {
			t.Fatalf("GetMessage(%s): %v", r.ID, err)
		}
		want, _ := wire.ShardForMessage("q", "", info.DedupKey, 2)
		if id, _ := wire.ParseMessageID(r.ID); id.Shard != want {
			t.Fatalf("send with key %q landed on shard %d, the key places it on %d", info.DedupKey, id.Shard, want)
		}
	}
	if len(a.Calls("SendBatch")) == 0 || len(b.Calls("SendBatch")) == 0 {
		t.Fatalf("20 auto-keyed sends did not spread: A %d, B %d", len(a.Calls("SendBatch")), len(b.Calls("SendBatch")))
	}
}

func TestBatchOfKeylessMessagesStaysOnOneShard(t *testing.T) {
	a, b := twoNodes(t)
	c := mustDial(t, []string{a.Addr})
	createOn(t, "q", a, b)
	items := make([]Outgoing, 10)
	for i := range items {
		items[i] = Outgoing{Body: []byte(fmt.Sprint(i))}
	}
	res, err := c.SendBatch(testCtx(t), "q", items)
	if err != nil {
		t.Fatalf("SendBatch: %v", err)
	}
	if n := len(a.Calls("SendBatch")) + len(b.Calls("SendBatch")); n != 1 {
		t.Fatalf("batch took %d calls, want 1", n)
	}
	first, _ := wire.ParseMessageID(res[0].ID)
	for _, r := range res {
		if id, _ := wire.ParseMessageID(r.ID); r.Err != nil || id.Shard != first.Shard {
			t.Fatalf("batch results spread over shards: %+v", res)
		}
	}
}

func TestAutoKeyOn(t *testing.T) {
	for shard := range uint32(8) {
		k := autoKeyOn("q", shard, wire.DefaultSlotTable(8), 8)
		if s, ok := wire.ShardForMessage("q", "", k, 8); !ok || s != shard || !strings.HasPrefix(k, "auto-") {
			t.Fatalf("autoKeyOn(q, %d, 8) = %q on shard %d", shard, k, s)
		}
	}
	if k1, k2 := autoKeyOn("q", 1, wire.DefaultSlotTable(8), 8), autoKeyOn("q", 1, wire.DefaultSlotTable(8), 8); k1 == k2 {
		t.Fatal("two auto keys are equal")
	}
}

// A RESOURCE_EXHAUSTED that carries RetryInfo (an overloaded node: nothing
// applied) is retried once the wait it asks for has passed, within the
// retry budget; one without it is a definite answer.
func TestRetryHonoursRetryInfo(t *testing.T) {
	s := clienttest.NewServer(t)
	cl := mustDial(t, []string{s.Addr}, fastRetry(4), WithSendCoalescing(0))
	mustCreate(t, cl, "q", QueueOptions{})
	s.Exhaust("Send", 2, 150*time.Millisecond)
	start := time.Now()
	if _, err := cl.Send(testCtx(t), "q", []byte("x")); err != nil {
		t.Fatalf("send after two overload refusals: %v", err)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("the send was retried after %v, before the 2 x 150 ms the node asked for", took)
	}
	if n := len(s.Calls("Send")); n != 3 {
		t.Fatalf("%d Send calls, want 3", n)
	}
	s.Exhaust("Send", 9, time.Millisecond)
	if _, err := cl.Send(testCtx(t), "q", []byte("y")); !errors.Is(err, ErrExhausted) {
		t.Fatalf("send past the retry budget: %v, want ErrExhausted", err)
	}
}

// A coalesced send whose item is refused with a retry time (a quota, a
// full send queue: nothing written) is sent again once the wait has
// passed, within the retry budget, dedup key or not; past the budget the
// error carries the wait.
func TestCoalescedSendHonoursItemRetry(t *testing.T) {
	s := clienttest.NewServer(t)
	cl := mustDial(t, []string{s.Addr}, fastRetry(4))
	mustCreate(t, cl, "q", QueueOptions{})
	s.ExhaustItems(2, 150*time.Millisecond)
	start := time.Now()
	if _, err := cl.Send(testCtx(t), "q", []byte("x")); err != nil {
		t.Fatalf("send after two refused items: %v", err)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("sent again after %v, before the 2 x 150 ms asked for", took)
	}
	s.ExhaustItems(9, 20*time.Millisecond)
	_, err := cl.Send(testCtx(t), "q", []byte("y"))
	if after, ok := RetryAfter(err); !errors.Is(err, ErrExhausted) || !ok || after != 20*time.Millisecond {
		t.Fatalf("past the retry budget: %v (retry after %v, %v)", err, after, ok)
	}
}
