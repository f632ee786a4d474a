package workload

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/raftq/raftq/jepsen-lite/history"
)

func TestClassifyFailsOnlyWhenNothingWasApplied(t *testing.T) {
	refusal := metadata.Pairs(LeaderTrailer, "n2=10.99.1.12:7101")
	unknownLeader := metadata.Pairs(LeaderTrailer, "")
	tests := []struct {
		name    string
		err     error
		trailer metadata.MD
		want    string
	}{
		{"success", nil, nil, history.OK},
		{"refused with a hint", status.Error(codes.Unavailable, "not the leader"), refusal, history.Fail},
		{"refused, leader unknown", status.Error(codes.Unavailable, "no leader"), unknownLeader, history.Fail},
		{"never connected", status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 10.99.1.11:7101: connect: connection refused"`), nil, history.Fail},
		{"unavailable, outcome unknown", status.Error(codes.Unavailable, "outcome unknown, the request may have been applied"), nil, history.Info},
		{"connection dropped mid-call", status.Error(codes.Unavailable, "error reading from server: EOF"), nil, history.Info},
		{"timeout", status.Error(codes.DeadlineExceeded, "context deadline exceeded"), nil, history.Info},
		{"plain context error", context.DeadlineExceeded, nil, history.Info},
		{"internal", status.Error(codes.Internal, "boom"), nil, history.Info},
		{"stale receipt", status.Error(codes.FailedPrecondition, "stale"), nil, history.Fail},
		{"invalid", status.Error(codes.InvalidArgument, "bad"), nil, history.Fail},
		{"not found", status.Error(codes.NotFound, "no queue"), nil, history.Fail},
		{"exhausted", status.Error(codes.ResourceExhausted, "quota"), nil, history.Fail},
		{"non-grpc error", errors.New("weird"), nil, history.Info},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, _, _ := Classify(tt.err, tt.trailer); got != tt.want {
				t.Errorf("Classify(%v) = %s, want %s", tt.err, got, tt.want)
			}
		})
	}
}

// A RESOURCE_EXHAUSTED answer is noted (a quota's, or a node's own
// limit) with the retry time it carried, which the quota checker requires.
func TestRefusalNotesAndRetryTime(t *testing.T) {
	withRetry := func(msg string, d time.Duration) error {
		st, err := status.New(codes.ResourceExhausted, msg).WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)})
		if err != nil {
			t.Fatal(err)
		}
		return st.Err()
	}
	quota := `tenant "t" is at its quota: 30 live messages on this shard, its share of quotas.max_messages is 30`
	tests := []struct {
		name    string
		err     error
		note    string
		retryMs int64
	}{
		{"quota with a retry time", withRetry(quota, time.Second), history.NoteQuota, 1000},
		{"a tap refusal about to lapse", withRetry(quota, 300*time.Microsecond), history.NoteQuota, 1},
		{"quota without a retry time", status.Error(codes.ResourceExhausted, quota), history.NoteQuota, 0},
		{"a node's memory guard", withRetry("node memory budget exhausted", time.Second), history.NoteExhausted, 1000},
		{"not a refusal", status.Error(codes.Unavailable, "no leader"), "", 0},
		{"success", nil, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if note, ms := Refusal(tt.err); note != tt.note || ms != tt.retryMs {
				t.Errorf("Refusal(%v) = %q, %d; want %q, %d", tt.err, note, ms, tt.note, tt.retryMs)
			}
		})
	}
}
