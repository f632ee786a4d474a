package client

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// LeaderTrailer is the trailer a node sets on UNAVAILABLE when it refused a
// call without applying it. Its value is "nodeID=grpcAddr" when the node knows
// the shard's leader, else empty or "nodeID=". UNAVAILABLE without it means
// the outcome is unknown: the call may have been applied.
const LeaderTrailer = "raftq-leader"

// LeaderHintTrailer is the trailer a node sets on an UNAVAILABLE whose
// outcome is unknown to name the shard leader it knows of
// ("nodeID=grpcAddr"), typically after a call it forwarded there was cut
// off. Unlike LeaderTrailer it does not say the call had no effect: only a
// call that may be repeated is retried there.
const LeaderHintTrailer = "raftq-leader-hint"

// ShardLeaderTrailer is the trailer a node adds to a call it served by
// forwarding to a shard's leader: "shard:nodeID=grpcAddr" per shard. The
// client notes those leaders (see Client.learnLeaders).
const ShardLeaderTrailer = "raftq-shard-leader"

// RetryPolicy bounds how a call is retried. The caller's context deadline
// bounds it too: a backoff that would end past the deadline is not slept.
type RetryPolicy struct {
	// MaxAttempts is the total number of attempts per call, first included.
	MaxAttempts int
	// BaseDelay and MaxDelay shape the exponential backoff with equal
	// jitter: before retry n (n >= 1) the client sleeps a uniform random
	// duration in [c/2, c], c = min(MaxDelay, BaseDelay*2^(n-1)). Half of
	// each step is fixed so the budget lasts a known least time (full
	// jitter, [0, c], let 10 attempts end within a second now and then,
	// before a new leader was elected). A leader hint skips the sleep the
	// first time it names a new node.
	BaseDelay time.Duration
	MaxDelay  time.Duration
}

// DefaultRetryPolicy allows 12 attempts with backoff from 25 ms up to 1 s:
// its sleeps add up to 3.3-6.6 s, so a call rides out a leader election
// (the failover bar is 3 s, typically 1-2) without stalling a caller much
// longer than that.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{MaxAttempts: 12, BaseDelay: 25 * time.Millisecond, MaxDelay: time.Second}
}

func (p RetryPolicy) validate() error {
	switch {
	case p.MaxAttempts < 1:
		return fmt.Errorf("MaxAttempts %d < 1", p.MaxAttempts)
	case p.BaseDelay <= 0:
		return fmt.Errorf("BaseDelay %v is not positive", p.BaseDelay)
	case p.MaxDelay < p.BaseDelay:
		return fmt.Errorf("MaxDelay %v < BaseDelay %v", p.MaxDelay, p.BaseDelay)
	}
	return nil
}

// ceiling is the upper bound of the backoff before retry n (n >= 1).
func (p RetryPolicy) ceiling(n int) time.Duration {
	d := p.BaseDelay
	for i := 1; i < n && d < p.MaxDelay; i++ {
		d *= 2
	}
	return min(d, p.MaxDelay)
}

// backoff draws the jittered sleep before retry n (n >= 1).
func (p RetryPolicy) backoff(n int) time.Duration {
	c := p.ceiling(n)
	return c/2 + rand.N(c-c/2+1)
}

// retryClass says what a failed attempt allows.
type retryClass int

const (
	noRetry      retryClass = iota // a definite answer: return it
	retryOther                     // refused, nothing applied: try another node after a backoff
	retryHinted                    // refused, nothing applied: try the hinted leader
	retryUnknown                   // the call may have been applied: only safe calls retry
)

// classify decides how to treat a failed attempt. refused reports the
// LeaderTrailer, hint the leader address in it. callerDone reports that the
// caller's own context ended, which is never retried.
func classify(code codes.Code, refused bool, hint string, callerDone bool) retryClass {
	if callerDone {
		return noRetry
	}
	switch code {
	case codes.Unavailable:
		switch {
		case hint != "":
			return retryHinted
		case refused:
			return retryOther
		}
		// A broken connection or an unknown outcome.
		return retryUnknown
	case codes.DeadlineExceeded, codes.Aborted, codes.Internal, codes.Unknown:
		// The per-attempt timeout or a broken stream: the node may have
		// applied the call before the failure.
		return retryUnknown
	}
	return noRetry
}

// errBadHint marks a leader hint that is not "nodeID=addr".
var errBadHint = errors.New("malformed leader hint")

// parseHint extracts the gRPC address from a "nodeID=grpcAddr" hint.
func parseHint(v string) (nodeID, addr string, err error) {
	id, a, ok := strings.Cut(v, "=")
	if !ok || a == "" || strings.ContainsAny(a, " =,") {
		return "", "", fmt.Errorf("%w: %q", errBadHint, v)
	}
	return id, a, nil
}

// refusal reads LeaderTrailer from trailers (or headers): whether the node
// refused the call, and the leader address when it named one.
func refusal(mds ...metadata.MD) (refused bool, addr string) {
	for _, md := range mds {
		vals := md.Get(LeaderTrailer)
		for _, v := range vals {
			if _, a, err := parseHint(v); err == nil {
				return true, a
			}
		}
		refused = refused || len(vals) > 0
	}
	return refused, ""
}

// leaderHint reads LeaderHintTrailer: the leader address a node named on
// an outcome-unknown failure, or "".
func leaderHint(mds ...metadata.MD) string {
	for _, md := range mds {
		for _, v := range md.Get(LeaderHintTrailer) {
			if _, a, err := parseHint(v); err == nil {
				return a
			}
		}
	}
	return ""
}

// retryAfter reads the google.rpc.RetryInfo of a RESOURCE_EXHAUSTED
// refusal: the server's word that nothing was applied and when to try
// again.
func retryAfter(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted {
		return 0, false
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}
