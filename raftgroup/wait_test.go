package raftgroup

import (
	"context"
	"errors"
	"testing"

	"github.com/hashicorp/raft"
)

// future answers err once answer is closed (never, if it stays open).
type future struct {
	answer chan struct{}
	err    error
}

func (f *future) Error() error { <-f.answer; return f.err }

func TestWaitFuture(t *testing.T) {
	boom := errors.New("boom")
	closed := make(chan struct{})
	close(closed)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name     string
		ctx      context.Context
		answered bool
		down     chan struct{}
		want     error
	}{
		{"answered", context.Background(), true, nil, boom},
		{"ctx ends first", cancelled, false, nil, context.Canceled},
		{"raft down, no answer", context.Background(), false, closed, raft.ErrRaftShutdown},
	} {
		f := &future{answer: make(chan struct{}), err: boom}
		if tc.answered {
			close(f.answer)
		}
		if err := WaitFuture(tc.ctx, f, tc.down); !errors.Is(err, tc.want) {
			t.Errorf("%s: WaitFuture = %v, want %v", tc.name, err, tc.want)
		}
		if !tc.answered {
			close(f.answer) // ends WaitFuture's goroutine
		}
	}
}

func TestNotLeaderError(t *testing.T) {
	for _, tc := range []struct {
		err  *NotLeaderError
		want string
	}{
		{&NotLeaderError{Group: "shard-1", LeaderID: "n2", LeaderAddr: "h2:7000"}, "shard-1: not leader (leader n2 at h2:7000)"},
		{&NotLeaderError{Group: "meta", LeaderID: "n2"}, "meta: not leader (leader n2)"},
		{&NotLeaderError{}, "not leader (leader unknown)"},
		{&NotLeaderError{Group: "shard-3", Waited: true}, "shard-3: no leader elected"},
		{&NotLeaderError{Group: "shard-3", LeaderID: "n2", LeaderAddr: "h2:9090", Waited: true}, "shard-3: leader n2 (h2:9090) not reachable in time"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("%+v: %q, want %q", *tc.err, got, tc.want)
		}
		var err error = tc.err
		if !errors.Is(err, ErrNotLeader) {
			t.Errorf("%+v does not match ErrNotLeader", *tc.err)
		}
	}
}
