package client

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/raftq/raftq/client/clienttest"
)

// Close with sends pending tells each whether it may have happened: a send
// that reached the node (held there by a stall) may be in the queue, so it
// is outcome-unknown, never a plain failure; one still waiting in the
// client never left, so it is not sent. Both say the client closed.
func TestCloseSortsPendingSendsByWhetherTheyLeft(t *testing.T) {
	s := clienttest.NewServer(t)
	c := mustDial(t, []string{s.Addr})
	mustCreate(t, c, "q", QueueOptions{})
	release, first := stallCalls(t, s, c)
	queued := make([]*PendingSend, 20)
	for i := range queued {
		queued[i] = c.SendAsync(testCtx(t), "q", []byte("queued"))
	}
	clienttest.WaitFor(t, "sends to queue behind the held calls", func() bool { return pendingSends(c) == len(queued) })
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, r := range first() {
		if !errors.Is(r.err, ErrOutcomeUnknown) || !errors.Is(r.err, ErrClosed) || errors.Is(r.err, ErrNotSent) {
			t.Fatalf("send in flight at Close = %v, want ErrOutcomeUnknown and ErrClosed", r.err)
		}
	}
	for i, p := range queued {
		if _, err := p.Wait(testCtx(t)); !errors.Is(err, ErrNotSent) || !errors.Is(err, ErrClosed) || errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("queued send %d after Close = %v, want ErrNotSent and ErrClosed", i, err)
		}
	}
	release()
	// What never left is not in the queue; what was out may be.
	clienttest.WaitFor(t, "the held calls to end", func() bool { return s.Stalled("SendBatch") == 0 })
	for _, call := range s.Calls("SendBatch") {
		if call.Items != 1 {
			t.Fatalf("a call carried %d messages; only the held single sends may have reached the node", call.Items)
		}
	}
	if _, err := c.Send(testCtx(t), "q", []byte("late")); !errors.Is(err, ErrClosed) || !errors.Is(err, ErrNotSent) {
		t.Fatalf("Send after Close = %v, want ErrClosed and ErrNotSent", err)
	}
}

// Flush returns once every pending send has its outcome, and says how much
// is left when its context ends first.
func TestFlushWaitsForPendingSends(t *testing.T) {
	s := clienttest.NewServer(t)
	c := mustDial(t, []string{s.Addr})
	mustCreate(t, c, "q", QueueOptions{})
	release, first := stallCalls(t, s, c)
	pending := make([]*PendingSend, 30)
	for i := range pending {
		pending[i] = c.SendAsync(testCtx(t), "q", []byte("x"))
	}
	short, cancel := context.WithTimeout(testCtx(t), 50*time.Millisecond)
	defer cancel()
	if err := c.Flush(short); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "still in flight") {
		t.Fatalf("Flush with sends held = %v, want DeadlineExceeded naming what is in flight", err)
	}
	release()
	if err := c.Flush(testCtx(t)); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	// Every outcome is known now: a Wait whose context has already ended
	// still gets it.
	done, cancelDone := context.WithCancel(context.Background())
	cancelDone()
	for i, p := range pending {
		if res, err := p.Wait(done); err != nil || res.ID == "" {
			t.Fatalf("send %d after Flush: %+v, %v", i, res, err)
		}
	}
	for _, r := range first() {
		if r.err != nil {
			t.Fatalf("held send: %v", r.err)
		}
	}
	if n := s.Count("q", clienttest.Ready); n != len(pending)+c.streamCalls() {
		t.Fatalf("%d messages ready, want %d", n, len(pending)+c.streamCalls())
	}
}

// Drain refuses new work at once, lets what is pending finish, then closes.
func TestDrainFinishesPendingWorkAndRefusesNew(t *testing.T) {
	s := clienttest.NewServer(t)
	c := mustDial(t, []string{s.Addr})
	mustCreate(t, c, "q", QueueOptions{})
	release, first := stallCalls(t, s, c)
	pending := make([]*PendingSend, 10)
	for i := range pending {
		pending[i] = c.SendAsync(testCtx(t), "q", []byte("x"))
	}
	drained := make(chan error, 1)
	go func() { drained <- c.Drain(testCtx(t)) }()
	clienttest.WaitFor(t, "the drain to begin", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.draining
	})
	if _, err := c.Send(testCtx(t), "q", []byte("new")); !errors.Is(err, ErrClosed) || !errors.Is(err, ErrNotSent) {
		t.Fatalf("Send while draining = %v, want ErrClosed and ErrNotSent", err)
	}
	select {
	case err := <-drained:
		t.Fatalf("Drain returned %v with sends held", err)
	default:
	}
	release()
	if err := <-drained; err != nil {
		t.Fatalf("Drain: %v", err)
	}
	for i, p := range pending {
		if res, err := p.Wait(testCtx(t)); err != nil || res.ID == "" {
			t.Fatalf("send %d pending at Drain: %+v, %v", i, res, err)
		}
	}
	for _, r := range first() {
		if r.err != nil {
			t.Fatalf("held send: %v", r.err)
		}
	}
	if _, err := c.ListQueues(testCtx(t)); !errors.Is(err, ErrClosed) {
		t.Fatalf("call after Drain = %v, want ErrClosed", err)
	}
}

// A send whose answer was lost after the node applied it, with nothing
// that makes a repeat safe, fails as outcome-unknown (the message is in
// the queue); a refusal does not.
func TestLostAnswerIsOutcomeUnknown(t *testing.T) {
	s := clienttest.NewServer(t)
	c := mustDial(t, []string{s.Addr}, WithAutoDedup(false), WithSendCoalescing(0), fastRetry(3))
	mustCreate(t, c, "q", QueueOptions{})
	s.LoseAnswer("Send", 1)
	_, err := c.Send(testCtx(t), "q", []byte("x"), Group("g"))
	if !errors.Is(err, ErrOutcomeUnknown) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Send with a lost answer = %v, want ErrOutcomeUnknown and ErrUnavailable", err)
	}
	if n := s.Count("q", clienttest.Ready); n != 1 {
		t.Fatalf("%d messages in the queue, want the one whose answer was lost", n)
	}
	s.Fail("GetQueue", 1, codes.NotFound)
	if _, err := c.GetQueue(testCtx(t), "q"); errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("a definite answer = %v, marked outcome-unknown", err)
	}
	s.Refuse("Send", 3, "")
	if _, err := c.Send(testCtx(t), "q", []byte("y"), Group("g")); !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("Send refused on every attempt = %v, want ErrUnavailable without ErrOutcomeUnknown", err)
	}
}

// Dial waits for a seed that is not up yet (a cluster starting beside the
// program), within its context and the retry budget.
func TestDialWaitsForASeedThatIsStarting(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	dialled := make(chan error, 1)
	go func() {
		c, err := Dial(testCtx(t), []string{addr})
		if err == nil {
			_ = c.Close()
		}
		dialled <- err
	}()
	// Refused connections for a while: Dial is still trying.
	time.Sleep(300 * time.Millisecond)
	select {
	case err := <-dialled:
		t.Fatalf("Dial gave up after refused connections: %v", err)
	default:
	}
	s, err := clienttest.StartAt(addr)
	if err != nil {
		t.Fatalf("StartAt: %v", err)
	}
	defer s.Stop()
	if err := <-dialled; err != nil {
		t.Fatalf("Dial once the seed is up: %v", err)
	}
}
