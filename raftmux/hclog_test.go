package raftmux

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
)

type recordLevels struct {
	mu     sync.Mutex
	levels map[string]slog.Level
}

func (r *recordLevels) Enabled(context.Context, slog.Level) bool { return true }
func (r *recordLevels) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.levels[rec.Message] = rec.Level
	return nil
}
func (r *recordLevels) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recordLevels) WithGroup(string) slog.Handler      { return r }

// RPCs a replica's own gate drops are logged at debug: raft reports each
// one at error, every election timeout, for as long as the gate holds.
func TestHCLoggerQuietsGatedRPCs(t *testing.T) {
	rec := &recordLevels{levels: map[string]slog.Level{}}
	l := HCLogger(slog.New(rec), "raft")
	l.Error("failed to make requestVote RPC", "error", ErrGated)
	l.Error("failed to make requestVote RPC", "error", fmt.Errorf("dial tcp: connection refused"))
	want := map[string]slog.Level{
		`raft: failed to make requestVote RPC: error="raftmux: raft traffic held back by this replica"`: slog.LevelDebug,
		`raft: failed to make requestVote RPC: error="dial tcp: connection refused"`:                    slog.LevelError,
	}
	for msg, lvl := range want {
		if got, ok := rec.levels[msg]; !ok || got != lvl {
			t.Errorf("%q logged at %v (seen %v), want %v; all: %v", msg, got, ok, lvl, rec.levels)
		}
	}
}
