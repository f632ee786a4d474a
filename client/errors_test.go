package client

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/raftq/raftq/fsm"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func TestErrorsMatchSentinels(t *testing.T) {
	all := []error{ErrStaleReceipt, ErrNotFound, ErrInvalid, ErrExists, ErrUnavailable, ErrExhausted, context.DeadlineExceeded, context.Canceled}
	for _, c := range []struct {
		code codes.Code
		want error
	}{
		{codes.FailedPrecondition, ErrStaleReceipt},
		{codes.NotFound, ErrNotFound},
		{codes.InvalidArgument, ErrInvalid},
		{codes.AlreadyExists, ErrExists},
		{codes.Unavailable, ErrUnavailable},
		{codes.ResourceExhausted, ErrExhausted},
		{codes.DeadlineExceeded, context.DeadlineExceeded},
		{codes.Canceled, context.Canceled},
		{codes.Internal, nil},
	} {
		t.Run(c.code.String(), func(t *testing.T) {
			err := fmt.Errorf("op: %w", fromStatus(status.Error(c.code, `queue "x" not found`)))
			for _, s := range all {
				if got := errors.Is(err, s); got != (s == c.want) {
					t.Errorf("errors.Is(%v, %v) = %v", err, s, got)
				}
			}
			var e *Error
			if !errors.As(err, &e) || e.Msg != `queue "x" not found` || e.Code != c.code {
				t.Fatalf("server message or code lost: %#v", e)
			}
			if status.Code(e) != c.code {
				t.Fatalf("status.Code = %v, want %v", status.Code(e), c.code)
			}
		})
	}
}

func TestItemError(t *testing.T) {
	if err := itemError(0, "ignored"); err != nil {
		t.Fatalf("code 0 gave %v", err)
	}
	if err := itemError(int32(codes.FailedPrecondition), ""); !errors.Is(err, ErrStaleReceipt) || err.Error() != "FailedPrecondition" {
		t.Fatalf("empty message item error = %v", err)
	}
}

func TestRetryPolicyBackoffBounds(t *testing.T) {
	p := RetryPolicy{MaxAttempts: 5, BaseDelay: 10 * time.Millisecond, MaxDelay: 70 * time.Millisecond}
	for n, want := range map[int]time.Duration{1: 10 * time.Millisecond, 2: 20 * time.Millisecond, 3: 40 * time.Millisecond, 4: 70 * time.Millisecond, 60: 70 * time.Millisecond} {
		if got := p.ceiling(n); got != want {
			t.Errorf("ceiling(%d) = %v, want %v", n, got, want)
		}
		bottom, top := want, time.Duration(0)
		for range 500 {
			d := p.backoff(n)
			if d < want/2 || d > want {
				t.Fatalf("backoff(%d) = %v outside [%v, %v]", n, d, want/2, want)
			}
			bottom, top = min(bottom, d), max(top, d)
		}
		if top-bottom < want/4 {
			t.Errorf("backoff(%d) stayed within %v-%v in 500 draws: jitter not spread", n, bottom, top)
		}
	}
}

// The default budget must outlast a leader election (the failover bar is
// 3 s) however the jitter falls: a send to a shard whose leader was just
// killed waits for the next one instead of failing.
func TestDefaultRetryPolicyOutlastsAnElection(t *testing.T) {
	p := DefaultRetryPolicy()
	if err := p.validate(); err != nil {
		t.Fatal(err)
	}
	if least := leastWait(p); least < 3*time.Second {
		t.Fatalf("default retries may all be spent in %v, less than a 3 s failover", least)
	}
	for range 200 {
		var total time.Duration
		for n := 1; n < p.MaxAttempts; n++ {
			total += p.backoff(n)
		}
		if total < leastWait(p) || total > 2*leastWait(p)+time.Duration(p.MaxAttempts) {
			t.Fatalf("default retries slept %v in all, outside [%v, %v]", total, leastWait(p), 2*leastWait(p))
		}
	}
}

func TestRetryPolicyValidate(t *testing.T) {
	for _, c := range []struct {
		p  RetryPolicy
		ok bool
	}{
		{DefaultRetryPolicy(), true},
		{RetryPolicy{MaxAttempts: 1, BaseDelay: 1, MaxDelay: 1}, true},
		{RetryPolicy{MaxAttempts: 0, BaseDelay: 1, MaxDelay: 1}, false},
		{RetryPolicy{MaxAttempts: 1, BaseDelay: 0, MaxDelay: 1}, false},
		{RetryPolicy{MaxAttempts: 1, BaseDelay: 2, MaxDelay: 1}, false},
	} {
		if err := c.p.validate(); (err == nil) != c.ok {
			t.Errorf("validate(%+v) = %v, want ok=%v", c.p, err, c.ok)
		}
	}
}

func TestParseHint(t *testing.T) {
	for _, c := range []struct {
		in, id, addr string
		ok           bool
	}{
		{"n2=127.0.0.1:7102", "n2", "127.0.0.1:7102", true},
		{"=host:1", "", "host:1", true},
		{"n2", "", "", false},
		{"n2=", "", "", false},
		{"n2=a=b", "", "", false},
		{"n2=a b", "", "", false},
	} {
		id, addr, err := parseHint(c.in)
		if (err == nil) != c.ok || id != c.id || addr != c.addr {
			t.Errorf("parseHint(%q) = %q, %q, %v", c.in, id, addr, err)
		}
		if !c.ok && !errors.Is(err, errBadHint) {
			t.Errorf("parseHint(%q) error %v is not errBadHint", c.in, err)
		}
	}
}

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		code       codes.Code
		refused    bool
		hint       string
		callerDone bool
		want       retryClass
	}{
		{codes.Unavailable, false, "", false, retryUnknown},
		{codes.Unavailable, true, "", false, retryOther},
		{codes.Unavailable, true, "h:1", false, retryHinted},
		{codes.Unavailable, true, "h:1", true, noRetry},
		{codes.DeadlineExceeded, false, "", false, retryUnknown},
		{codes.InvalidArgument, false, "", false, noRetry},
		{codes.NotFound, false, "", false, noRetry},
		{codes.FailedPrecondition, true, "h:1", false, noRetry},
		{codes.AlreadyExists, false, "", false, noRetry},
		{codes.ResourceExhausted, false, "", false, noRetry},
	} {
		if got := classify(c.code, c.refused, c.hint, c.callerDone); got != c.want {
			t.Errorf("classify(%v, %v, %q, %v) = %v, want %v", c.code, c.refused, c.hint, c.callerDone, got, c.want)
		}
	}
}

func TestRefusalTrailer(t *testing.T) {
	for _, c := range []struct {
		md      metadata.MD
		refused bool
		addr    string
	}{
		{metadata.MD{}, false, ""},
		{metadata.Pairs(LeaderTrailer, ""), true, ""},
		{metadata.Pairs(LeaderTrailer, "n1="), true, ""},
		{metadata.Pairs(LeaderTrailer, "n1=10.0.0.1:7101"), true, "10.0.0.1:7101"},
	} {
		refused, addr := refusal(nil, c.md)
		if refused != c.refused || addr != c.addr {
			t.Errorf("refusal(%v) = %v, %q", c.md, refused, addr)
		}
	}
}

func TestSleepCtxRespectsDeadline(t *testing.T) {
	// A backoff that would end past the deadline is not slept: sleepCtx
	// answers DeadlineExceeded while the context is still live. A sleep
	// that waited for the deadline would return only once it ended.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := sleepCtx(ctx, time.Hour); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("sleepCtx past deadline = %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("sleepCtx slept until the deadline although the backoff would end past it")
	}
}

// leastWait is the shortest total the sleeps of a call that uses every
// attempt of p can add up to.
func leastWait(p RetryPolicy) time.Duration {
	var d time.Duration
	for n := 1; n < p.MaxAttempts; n++ {
		d += p.ceiling(n) / 2
	}
	return d
}

// A refusal for a log format some replica lacks is ErrUpgradePending, not
// a stale receipt: the caller may fall back to an older call. The text is
// the server's (fsm.FormatLagError).
func TestFormatLagIsUpgradePending(t *testing.T) {
	lag := &fsm.FormatLagError{Group: "shard-0", Kind: "snooze", Need: 7, Lagging: []fsm.NodeFormat{{NodeID: "n3", Format: 6}}}
	err := fromStatus(status.Error(codes.FailedPrecondition, lag.Error()))
	if !errors.Is(err, ErrUpgradePending) || errors.Is(err, ErrStaleReceipt) {
		t.Fatalf("%v: want ErrUpgradePending only", err)
	}
}
