package main

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/client/clienttest"
)

func TestClassifySend(t *testing.T) {
	refusal := &client.Error{Code: codes.ResourceExhausted, Msg: "shard 0 is overloaded", RetryAfter: 200 * time.Millisecond}
	bare := &client.Error{Code: codes.ResourceExhausted, Msg: "queue full"}
	for _, tc := range []struct {
		name string
		err  error
		want sendClass
	}{
		{"refusal with a retry time", fmt.Errorf("send to %q: %w", "a/q", refusal), classRefused},
		{"a batch item's refusal", &client.BatchError{Errs: []error{nil, refusal}}, classRefused},
		{"refusal without a retry time", fmt.Errorf("send: %w", bare), classRefusedBare},
		{"deadline", &client.Error{Code: codes.DeadlineExceeded, Msg: "deadline"}, classTimeout},
		{"the caller's deadline", fmt.Errorf("wait: %w", context.DeadlineExceeded), classTimeout},
		{"timeout of unknown outcome", fmt.Errorf("%w: %w", client.ErrOutcomeUnknown, &client.Error{Code: codes.DeadlineExceeded}), classTimeout},
		{"unavailable", &client.Error{Code: codes.Unavailable, Msg: "no leader"}, classUnavailable},
		{"outcome unknown", fmt.Errorf("%w: connection reset", client.ErrOutcomeUnknown), classUnavailable},
		{"an exhausted outcome-unknown is no refusal", fmt.Errorf("%w: %w", client.ErrOutcomeUnknown, refusal), classUnavailable},
		{"invalid", &client.Error{Code: codes.InvalidArgument, Msg: "too big"}, classOther},
		{"interrupted", fmt.Errorf("send: %w", context.Canceled), classOther},
		{"plain", errors.New("boom"), classOther},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := classifySend(tc.err); got != tc.want {
				t.Fatalf("classifySend(%v) = %d, want %d", tc.err, got, tc.want)
			}
			if got := tc.want.definite(); got != (tc.want == classRefused || tc.want == classRefusedBare) {
				t.Fatalf("definite = %v", got)
			}
		})
	}
	o := sendOutcomes{Accepted: 9, Refused: 5, RefusedBare: 1, Timeouts: 2, Unavailable: 3, Other: 4}
	if got := o.failedOtherwise(); got != 10 {
		t.Fatalf("failedOtherwise = %d, want 10", got)
	}
}

// once is a client that makes every call once: refusals reach the bench.
var once = client.WithRetry(client.RetryPolicy{MaxAttempts: 1, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond})

// noHold makes every send reach the fake, so each refusal it was told to
// make is one the bench counts.
var noHold = client.WithSendHold(false)

// A refused send of tenant B's kind waits the time it was given and goes
// again; it is booked once, acked, with the wait in its enqueue latency,
// and every refusal is counted.
func TestResendRefused(t *testing.T) {
	s, c, ctx := fakeLoad(t, once, noHold)
	const wait = 150 * time.Millisecond
	s.Exhaust("SendBatch", 2, wait) // Send leaves as a coalesced SendBatch
	l := newLoad(c, "q", loadSpec{producers: 1, inflight: 1, sendBatch: 1, size: 32, total: 1, resendRefused: true})
	l.measuring.Store(true)
	l.startProducers(ctx)
	l.prodWG.Wait()
	if got := l.led.tally(); got.Acked != 1 || got.Unknown != 0 || got.Refused != 0 {
		t.Fatalf("tally %+v, want the one message acked", got)
	}
	o := l.outcomeCounts()
	if o.Accepted != 1 || o.Refused != 2 || o.failedOtherwise() != 0 {
		t.Fatalf("outcomes %+v, want 1 accepted after 2 refusals", o)
	}
	if got := l.offered.Load(); got != 1 {
		t.Errorf("offered %d, want 1: a resend is the same message", got)
	}
	if e := l.enqueue.summary(); e.Count != 1 || e.Max < float64(2*wait/time.Millisecond) {
		t.Errorf("enqueue %+v: want one send of at least the two waits, %v", e, 2*wait)
	}
	if r := l.retryAfter.summary(); r.Count != 2 || r.P50 < 140 || r.P50 > 160 {
		t.Errorf("retry times %+v, want 2 of %v", r, wait)
	}
}

// Without resendRefused a refusal fails the send, booked as refused (not
// stored) rather than of unknown outcome.
func TestRefusalBookedRefused(t *testing.T) {
	s, c, ctx := fakeLoad(t, once, noHold)
	s.Exhaust("SendBatch", 1, time.Second)
	l := newLoad(c, "q", loadSpec{producers: 1, inflight: 1, sendBatch: 1, size: 32, total: 2})
	l.startProducers(ctx)
	l.prodWG.Wait()
	if got := l.led.tally(); got.Acked != 1 || got.Refused != 1 || got.Unknown != 0 {
		t.Fatalf("tally %+v, want 1 acked, 1 refused", got)
	}
	if o := l.outcomeCounts(); o.Accepted != 1 || o.Refused != 1 {
		t.Fatalf("outcomes %+v", o)
	}
}

// The flood offers its batches open loop and sorts every item's answer:
// a call refused whole with a retry time, items refused without one, an
// unavailable call, and the rest taken.
func TestFloodSortsOutcomes(t *testing.T) {
	s, c, ctx := fakeLoad(t, once, noHold)
	s.Exhaust("SendBatch", 1, 300*time.Millisecond)
	s.FailItems(2, codes.ResourceExhausted)
	s.Fail("SendBatch", 1, codes.Unavailable)
	l := newLoad(c, "q", loadSpec{producers: 1, inflight: 1, sendBatch: 4, size: 32, flood: true, rate: 200})
	floodFor(ctx, l, 40)
	o := l.outcomeCounts()
	offered := l.offered.Load()
	if o.Refused != 4 || o.RefusedBare != 2 || o.Unavailable != 4 || o.Timeouts != 0 || o.Other != 0 {
		t.Fatalf("outcomes %+v, want 4 refused with a retry time, 2 without, 4 unavailable", o)
	}
	if o.Accepted+o.Refused+o.failedOtherwise() != offered {
		t.Fatalf("outcomes %+v do not add up to the %d offered", o, offered)
	}
	tl := l.led.tally()
	if tl.Acked != o.Accepted || tl.Refused != 6 || tl.Unknown != 4 {
		t.Fatalf("tally %+v against outcomes %+v: want refusals booked refused, the unavailable call unknown", tl, o)
	}
	if got := s.Count("q", clienttest.Ready); uint64(got) != o.Accepted {
		t.Errorf("the fake holds %d messages, %d were taken", got, o.Accepted)
	}
}

// With the client's send hold (the default), the fake's one refusal is
// kept: the sends that follow within its retry time are refused by the
// client, counted apart, and never reach the fake.
func TestFloodCountsHeldRefusals(t *testing.T) {
	s, c, ctx := fakeLoad(t, once)
	s.Exhaust("SendBatch", 1, 300*time.Millisecond)
	l := newLoad(c, "q", loadSpec{producers: 1, inflight: 1, sendBatch: 4, size: 32, flood: true, rate: 400})
	floodFor(ctx, l, 40)
	o := l.outcomeCounts()
	if o.Refused-o.Held != 4 || o.Held == 0 || o.Held%4 != 0 || o.failedOtherwise() != 0 {
		t.Fatalf("outcomes %+v: want the fake's 4 refusals and whole calls held by the client", o)
	}
	if got := s.Count("q", clienttest.Ready); uint64(got) != o.Accepted {
		t.Errorf("the fake holds %d messages, %d were taken", got, o.Accepted)
	}
}

// floodFor runs l's producers until they have offered n messages (or 20
// s have passed), then stops them.
func floodFor(ctx context.Context, l *load, n uint64) {
	l.startProducers(ctx)
	deadline := time.Now().Add(20 * time.Second)
	for l.offered.Load() < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	l.stopProducers()
}
