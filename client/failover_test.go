package client

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/raftq/raftq/client/clienttest"
	"github.com/raftq/raftq/internal/grayproxy"
	"google.golang.org/grpc/codes"
)

// Probes quick enough for tests; a health check on loopback answers in
// well under 100 ms on a loaded machine.
var quickProbe = WithLivenessProbe(100*time.Millisecond, 500*time.Millisecond)

// behindProxy starts nodes A (reached through a proxy that can go silent)
// and B, both saying A leads the only shard, and a client dialled through
// both whose attempts would otherwise wait a minute. Queue "q" exists on
// both.
func behindProxy(t *testing.T, opts ...Option) (a, b *clienttest.Server, px *grayproxy.Proxy, c *Client) {
	t.Helper()
	a, b = clienttest.NewServer(t), clienttest.NewServer(t)
	px = grayproxy.Start(t, a.Addr)
	a.SetShardMap(0, px.Addr)
	b.SetShardMap(0, px.Addr)
	c = mustDial(t, []string{px.Addr, b.Addr}, append([]Option{WithCallTimeout(time.Minute), quickProbe, fastRetry(5)}, opts...)...)
	createOn(t, "q", a, b)
	return a, b, px, c
}

func ready(s *clienttest.Server) int { return s.Count("q", clienttest.Ready) }

// A node that stops answering (its replies are lost; calls still reach
// it) is left within the liveness probe, not the minute an attempt may
// take, and the next calls are not sent to it at all.
func TestSilentNodeIsLeftWithinTheProbe(t *testing.T) {
	a, b, px, c := behindProxy(t)
	mustSend(t, c, "q", "before")
	if ready(a) != 1 {
		t.Fatalf("first send did not go to the shard's leader A")
	}
	px.Drop(false, true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Send(ctx, "q", []byte("during")); err != nil {
		t.Fatalf("send while A is silent: %v", err)
	}
	if ready(b) != 1 {
		t.Fatalf("send while A is silent did not land on B")
	}
	calls := len(a.Calls("SendBatch"))
	mustSend(t, c, "q", "after")
	if n := len(a.Calls("SendBatch")); n != calls {
		t.Fatalf("A got %d more calls while silent; want none sent to it", n-calls)
	}
	if ready(b) != 2 {
		t.Fatalf("B holds %d messages, want 2", ready(b))
	}
}

// A call that may not be repeated (a keyless send) to a node that falls
// silent fails as outcome unknown within the probe, and is not retried.
func TestSilentNodeFailsAnUnsafeCallWithoutRetry(t *testing.T) {
	a, _, px, c := behindProxy(t, WithAutoDedup(false), WithSendCoalescing(0))
	px.Drop(false, true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Keyless and ungrouped: any node; make it A by trying until A was
	// the one called.
	for len(a.Calls("Send")) == 0 {
		_, err := c.Send(ctx, "q", []byte("x"))
		if ctx.Err() != nil {
			t.Fatal("send waited for its caller's deadline")
		}
		if err != nil && len(a.Calls("Send")) == 1 {
			if !errors.Is(err, ErrUnavailable) {
				t.Fatalf("keyless send to a silent node = %v, want ErrUnavailable", err)
			}
			break
		}
		if err != nil {
			t.Fatalf("keyless send = %v", err)
		}
	}
	if n := len(a.Calls("Send")); n != 1 {
		t.Fatalf("A saw %d keyless sends, want 1: an unknown outcome is not retried", n)
	}
}

// A connection that cannot be made means nothing was sent, so even a call
// that may not be repeated goes on to another node.
func TestUnreachableNodeIsARefusal(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	_ = lis.Close()
	b := clienttest.NewServer(t)
	b.SetShardMap(0, dead)
	c := mustDial(t, []string{b.Addr, dead}, quickProbe, fastRetry(5), WithAutoDedup(false))
	createOn(t, "q", b)
	// Grouped and keyless: bound for the shard's leader (dead), not safe
	// to repeat after an unknown outcome.
	if _, err := c.Send(testCtx(t), "q", []byte("x"), Group("g")); err != nil {
		t.Fatalf("keyless send with an unreachable leader: %v", err)
	}
	if ready(b) != 1 {
		t.Fatal("send did not land on B")
	}
}

// UNAVAILABLE with an unknown outcome and a leader hint: a call that may
// be repeated is repeated at the hinted leader; one that may not is not.
func TestUnknownOutcomeHintIsFollowedOnlyWhenSafe(t *testing.T) {
	t.Run("safe", func(t *testing.T) {
		a, b, _, c := behindProxy(t)
		a.FailHint("SendBatch", 1, "nodeB="+b.Addr)
		mustSend(t, c, "q", "x")
		if ready(b) != 1 || len(a.Calls("SendBatch")) != 1 {
			t.Fatalf("B holds %d, A saw %d calls; want the retry at B", ready(b), len(a.Calls("SendBatch")))
		}
		if got := c.smap.Load().leader(0); got != b.Addr {
			t.Fatalf("leader of shard 0 after the hint = %q, want %q", got, b.Addr)
		}
	})
	t.Run("unsafe", func(t *testing.T) {
		a, b, _, c := behindProxy(t, WithAutoDedup(false))
		a.FailHint("SendBatch", 1, "nodeB="+b.Addr)
		_, err := c.Send(testCtx(t), "q", []byte("x"), Group("g"))
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("keyless send failing with a hint = %v, want ErrUnavailable", err)
		}
		if len(b.Calls("SendBatch")) != 0 {
			t.Fatal("a keyless send with an unknown outcome was repeated at the hinted node")
		}
	})
}

// Items a node could not commit are sent again at the leader it named,
// or, when it named none, at another node.
func TestFailedItemsGoWhereTheNodeSays(t *testing.T) {
	t.Run("hint", func(t *testing.T) {
		a, b, _, c := behindProxy(t)
		a.FailItems(1, codes.Unavailable)
		a.HintItems("nodeB=" + b.Addr)
		mustSend(t, c, "q", "x")
		if ready(b) != 1 || ready(a) != 0 {
			t.Fatalf("A holds %d, B %d; want the item resent at B", ready(a), ready(b))
		}
		if got := c.smap.Load().leader(0); got != b.Addr {
			t.Fatalf("leader of shard 0 after the hint = %q, want %q", got, b.Addr)
		}
	})
	t.Run("no hint", func(t *testing.T) {
		a, b, _, c := behindProxy(t)
		a.FailItems(1, codes.Unavailable)
		mustSend(t, c, "q", "x")
		if ready(b) != 1 || ready(a) != 0 {
			t.Fatalf("A holds %d, B %d; want the item resent at B, A passed over", ready(a), ready(b))
		}
	})
}

func TestWithLivenessProbeValidates(t *testing.T) {
	for _, c := range []struct{ after, timeout time.Duration }{{-1, time.Second}, {time.Second, 0}, {0, time.Second}} {
		if err := WithLivenessProbe(c.after, c.timeout).apply(&config{}); err == nil {
			t.Errorf("WithLivenessProbe(%v, %v) accepted", c.after, c.timeout)
		}
	}
	if err := WithLivenessProbe(0, 0).apply(&config{}); err != nil {
		t.Errorf("WithLivenessProbe(0, 0) (off) rejected: %v", err)
	}
}
