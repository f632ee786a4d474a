package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/raftq/raftq/client/clienttest"
)

// pendingSends counts the sends queued (not yet in a call) on c's streams.
func pendingSends(c *Client) int {
	n := 0
	c.streams.Range(func(_, v any) bool {
		s := v.(*sendStream)
		s.mu.Lock()
		for _, p := range s.pending {
			if p.state == sendWaiting {
				n++
			}
		}
		s.mu.Unlock()
		return true
	})
	return n
}

type sent struct {
	body string
	res  SendResult
	err  error
}

// sendAll starts one Send per body and returns a function that waits for
// them all.
func sendAll(ctx context.Context, c *Client, bodies []string, opts ...SendOption) func() []sent {
	out := make([]sent, len(bodies))
	var wg sync.WaitGroup
	for i, b := range bodies {
		wg.Go(func() {
			res, err := c.Send(ctx, "q", []byte(b), opts...)
			out[i] = sent{body: b, res: res, err: err}
		})
	}
	return func() []sent { wg.Wait(); return out }
}

func bodies(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// stallCalls makes the server hold SendBatch and fills every call slot of
// the client's stream with one send each, so later sends must queue.
func stallCalls(t *testing.T, s *clienttest.Server, c *Client) (release func(), first func() []sent) {
	t.Helper()
	release = s.Stall("SendBatch")
	t.Cleanup(release)
	// One at a time, so each takes a call of its own.
	var waits []func() []sent
	for i := range c.streamCalls() {
		waits = append(waits, sendAll(testCtx(t), c, []string{fmt.Sprintf("first-%d", i)}))
		clienttest.WaitFor(t, "a call slot in use", func() bool { return s.Stalled("SendBatch") == i+1 })
	}
	first = func() []sent {
		var out []sent
		for _, w := range waits {
			out = append(out, w()...)
		}
		return out
	}
	return release, first
}

func TestConcurrentSendsLeaveTogether(t *testing.T) {
	s := clienttest.NewServer(t)
	c := mustDial(t, []string{s.Addr})
	mustCreate(t, c, "q", QueueOptions{})
	release, first := stallCalls(t, s, c)

	const queued = 100
	rest := sendAll(testCtx(t), c, bodies("queued", queued))
	clienttest.WaitFor(t, "sends to queue behind the busy calls", func() bool { return pendingSends(c) == queued })
	release()

	all := append(first(), rest()...)
	ids := map[string]bool{}
	for _, r := range all {
		if r.err != nil {
			t.Fatalf("Send(%s): %v", r.body, r.err)
		}
		if ids[r.res.ID] {
			t.Fatalf("id %s returned twice", r.res.ID)
		}
		ids[r.res.ID] = true
		// Each sender got the id of its own message, not a neighbour's.
		m, err := c.GetMessage(testCtx(t), r.res.ID)
		if err != nil || string(m.Body) != r.body {
			t.Fatalf("message %s holds %q (%v), sent %q", r.res.ID, m.Body, err, r.body)
		}
	}
	calls := s.Calls("SendBatch")
	items := 0
	for _, call := range calls {
		items += call.Items
	}
	if items != c.streamCalls()+queued {
		t.Fatalf("calls carried %d messages, sent %d", items, c.streamCalls()+queued)
	}
	// The queued sends left as one call (the first free slot takes them
	// all); allow a second in case a slot freed while they were taken.
	if len(calls) > c.streamCalls()+2 {
		t.Fatalf("%d SendBatch calls for %d sends: not coalesced", len(calls), c.streamCalls()+queued)
	}
}

func TestCoalescedItemErrorsReachTheirSender(t *testing.T) {
	s := clienttest.NewServer(t)
	c := mustDial(t, []string{s.Addr})
	mustCreate(t, c, "q", QueueOptions{})
	release, first := stallCalls(t, s, c)

	ctx := testCtx(t)
	good := sendAll(ctx, c, bodies("good", 5))
	var badErr error
	var wg sync.WaitGroup
	wg.Go(func() { _, badErr = c.Send(ctx, "q", []byte("bad"), Priority(10)) })
	clienttest.WaitFor(t, "sends to queue", func() bool { return pendingSends(c) == 6 })
	release()
	wg.Wait()

	if !errors.Is(badErr, ErrInvalid) {
		t.Fatalf("send with priority 10 = %v, want ErrInvalid", badErr)
	}
	for _, r := range append(first(), good()...) {
		if r.err != nil {
			t.Fatalf("Send(%s) batched with an invalid message: %v", r.body, r.err)
		}
	}
}

func TestCoalescedCallFailureReachesEverySender(t *testing.T) {
	s := clienttest.NewServer(t)
	c := mustDial(t, []string{s.Addr}, fastRetry(2))
	mustCreate(t, c, "q", QueueOptions{})
	release, first := stallCalls(t, s, c)

	queued := sendAll(testCtx(t), c, bodies("queued", 10))
	clienttest.WaitFor(t, "sends to queue", func() bool { return pendingSends(c) == 10 })
	// The stalled calls succeed; the next call (all ten queued) is refused
	// as invalid, which is never retried.
	s.Fail("SendBatch", 1, codes.InvalidArgument)
	release()
	for _, r := range first() {
		if r.err != nil {
			t.Fatalf("Send(%s): %v", r.body, r.err)
		}
	}
	for _, r := range queued() {
		if !errors.Is(r.err, ErrInvalid) {
			t.Fatalf("Send(%s) in a failed call = %v, want ErrInvalid", r.body, r.err)
		}
	}
}

func TestSendCancelledWhileQueuedIsNotSent(t *testing.T) {
	s := clienttest.NewServer(t)
	c := mustDial(t, []string{s.Addr})
	mustCreate(t, c, "q", QueueOptions{})
	release, first := stallCalls(t, s, c)

	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan error, 1)
	go func() {
		_, err := c.Send(ctx, "q", []byte("cancelled"))
		done <- err
	}()
	clienttest.WaitFor(t, "the send to queue", func() bool { return pendingSends(c) == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) || !errors.Is(err, ErrNotSent) {
		t.Fatalf("cancelled queued send = %v, want ErrNotSent and context.Canceled", err)
	}
	release()
	cancelledNeverSent(t, s, c, first)
}

// cancelledNeverSent checks, after stallCalls' calls are released, that
// they succeeded and that the one cancelled send never reached the server:
// a send after the release starts a call of its own, and the cancelled
// message must not ride along.
func cancelledNeverSent(t *testing.T, s *clienttest.Server, c *Client, first func() []sent) {
	t.Helper()
	for _, r := range first() {
		if r.err != nil {
			t.Fatalf("Send(%s): %v", r.body, r.err)
		}
	}
	mustSend(t, c, "q", "after")
	items := 0
	for _, call := range s.Calls("SendBatch") {
		items += call.Items
	}
	if items != c.streamCalls()+1 {
		t.Fatalf("server received %d messages, want %d (the cancelled one was sent)", items, c.streamCalls()+1)
	}
}

func TestSendCoalescingOption(t *testing.T) {
	if _, err := Dial(testCtx(t), []string{"127.0.0.1:1"}, WithSendCoalescing(-1)); !errors.Is(err, errCoalesceOff) {
		t.Fatalf("WithSendCoalescing(-1) = %v, want a refusal", err)
	}
	s := clienttest.NewServer(t)
	c := mustDial(t, []string{s.Addr}, WithSendCoalescing(0))
	mustCreate(t, c, "q", QueueOptions{})
	mustSend(t, c, "q", "x")
	if n, b := len(s.Calls("Send")), len(s.Calls("SendBatch")); n != 1 || b != 0 {
		t.Fatalf("with coalescing off: %d Send and %d SendBatch calls, want 1 and 0", n, b)
	}
}

// A client dialled before the cluster placed its shards learns the map on
// its next sends instead of sending unrouted, one call per message, for
// good.
func TestEmptyShardMapIsReloaded(t *testing.T) {
	s := clienttest.NewServer(t)
	s.SetShardMap(0) // no shards yet
	c := mustDial(t, []string{s.Addr})
	if n := c.ShardCount(); n != 0 {
		t.Fatalf("shard count %d at dial, want 0", n)
	}
	mustCreate(t, c, "q", QueueOptions{})
	s.SetShardMap(0, s.Addr)
	time.Sleep(minRefreshGap + 50*time.Millisecond)
	mustSend(t, c, "q", "x")
	if n := c.ShardCount(); n != 1 {
		t.Fatalf("shard count %d after a send, want 1", n)
	}
	if n, b := len(s.Calls("Send")), len(s.Calls("SendBatch")); n != 0 || b != 1 {
		t.Fatalf("%d Send and %d SendBatch calls, want the send coalesced (0 and 1)", n, b)
	}
}

// A node answers the items of a batch its shard could not commit with
// UNAVAILABLE (no leader in time, a split batch cut by a leadership
// change) while the call succeeds. A coalesced Send is retried like a
// single Send would be: with its dedup key, within the retry budget.
func TestCoalescedUncommittedItemsAreRetried(t *testing.T) {
	s := clienttest.NewServer(t)
	c := mustDial(t, []string{s.Addr}, fastRetry(4))
	mustCreate(t, c, "q", QueueOptions{})

	s.FailItems(2, codes.Unavailable)
	r := mustSend(t, c, "q", "retried")
	if m, err := c.GetMessage(testCtx(t), r.ID); err != nil || string(m.Body) != "retried" {
		t.Fatalf("message %s: %v %v", r.ID, m, err)
	}
	if n := len(s.Calls("SendBatch")); n != 3 {
		t.Fatalf("%d calls, want 3 (two failed items, then success)", n)
	}

	// The budget bounds it.
	s.FailItems(4, codes.Unavailable) // exactly the budget: every attempt fails
	if _, err := c.Send(testCtx(t), "q", []byte("x")); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "gave up after 4 attempts") {
		t.Fatalf("Send after the budget = %v, want ErrUnavailable after 4 attempts", err)
	}
	// A definite item refusal is not retried.
	before := len(s.Calls("SendBatch"))
	s.FailItems(1, codes.InvalidArgument)
	if _, err := c.Send(testCtx(t), "q", []byte("x")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Send = %v, want ErrInvalid", err)
	}
	if n := len(s.Calls("SendBatch")) - before; n != 1 {
		t.Fatalf("an invalid item was sent %d times", n)
	}
	// Without a dedup key a retry could enqueue twice: not retried.
	nokey := mustDial(t, []string{s.Addr}, fastRetry(4), WithAutoDedup(false))
	before = len(s.Calls("SendBatch"))
	s.FailItems(1, codes.Unavailable)
	if _, err := nokey.Send(testCtx(t), "q", []byte("x"), Group("g")); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("keyless Send = %v, want ErrUnavailable", err)
	}
	if n := len(s.Calls("SendBatch")) - before; n != 1 {
		t.Fatalf("a keyless item was sent %d times", n)
	}
}

// A send carrying its own gRPC metadata (auth, tenant, tracing) is not
// coalesced: a batch goes out under one set of metadata.
func TestSendWithMetadataIsNotCoalesced(t *testing.T) {
	s := clienttest.NewServer(t)
	c := mustDial(t, []string{s.Addr})
	mustCreate(t, c, "q", QueueOptions{})
	ctx := metadata.AppendToOutgoingContext(testCtx(t), "tenant", "a")
	if _, err := c.Send(ctx, "q", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if n, b := len(s.Calls("Send")), len(s.Calls("SendBatch")); n != 1 || b != 0 {
		t.Fatalf("%d Send and %d SendBatch calls, want 1 and 0", n, b)
	}
}

// An item waiting to be retried is dropped once its sender has gone (its
// Send returned "outcome unknown"): sent later it could land after the next
// message the sender sends to the same group.
func TestCoalescedRetryDropsItemsOfEndedSenders(t *testing.T) {
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	ended := &pendingSend{ctx: gone, done: make(chan sendOutcome, 1), lastErr: ErrUnavailable, release: func() {}}
	live := &pendingSend{ctx: context.Background(), done: make(chan sendOutcome, 1), lastErr: ErrUnavailable, release: func() {}}
	kept := dropEnded([]*pendingSend{ended, live})
	if len(kept) != 1 || kept[0] != live {
		t.Fatalf("kept %d items, want only the live sender's", len(kept))
	}
	select {
	case o := <-ended.done:
		if !errors.Is(o.err, ErrUnavailable) {
			t.Fatalf("ended sender answered %v, want its last item error", o.err)
		}
	default:
		t.Fatal("ended sender got no answer")
	}
	select {
	case o := <-live.done:
		t.Fatalf("live sender answered early: %+v", o)
	default:
	}
}

// A stream keeps 8 calls in flight on a one-shard cluster and 4 per shard
// on a larger one, where deeper send pipelines let producers outrun
// consumers.
func TestStreamCallsFollowTheShardCount(t *testing.T) {
	for _, c := range []struct {
		shards int
		want   int
	}{{1, coalesceCallsOneShard}, {2, coalesceCallsPerShard}} {
		s := clienttest.NewServer(t)
		leaders := make([]string, c.shards)
		for i := range leaders {
			leaders[i] = s.Addr
		}
		s.SetShardMap(0, leaders...)
		cl := mustDial(t, []string{s.Addr})
		mustCreate(t, cl, "q", QueueOptions{})
		release := s.Stall("SendBatch")
		t.Cleanup(release)
		// One at a time, so each takes a free call slot if there is one.
		var waits []func() []sent
		for i := range c.want + 2 {
			waits = append(waits, sendAll(testCtx(t), cl, []string{fmt.Sprintf("m-%d", i)}, Group(groupOn("q", 0))))
			if i < c.want {
				clienttest.WaitFor(t, "a call slot in use", func() bool { return s.Stalled("SendBatch") == i+1 })
			}
		}
		time.Sleep(100 * time.Millisecond) // room for a call that should not start
		if n := s.Stalled("SendBatch"); n != c.want {
			t.Fatalf("%d shards: %d calls in flight, want %d", c.shards, n, c.want)
		}
		release()
		for _, w := range waits {
			for _, r := range w() {
				if r.err != nil {
					t.Fatalf("%d shards: Send(%s): %v", c.shards, r.body, r.err)
				}
			}
		}
	}
}
