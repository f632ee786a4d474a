package main

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
)

// stopLog is the node's log handler. Once the node is stopping, the
// complaints of raft, its transport and gossip about peers and
// connections going away are expected (this node closes its own
// connections, and when a whole cluster stops its peers close theirs):
// they drop to debug, so a clean stop reads as a short, calm sequence and
// an error logged while stopping still stands out. Lines of raft-wal and
// of raftq's own code keep their level.
type stopLog struct {
	inner    slog.Handler
	stopping *atomic.Bool
}

// peerChatter are the prefixes of lines from hashicorp/raft ("raft: "),
// its network transport ("raft-net: ") and memberlist ("memberlist: ").
var peerChatter = []string{"raft: ", "raft-net: ", "memberlist: "}

func newStopLog(inner slog.Handler) (*stopLog, *atomic.Bool) {
	var stopping atomic.Bool
	return &stopLog{inner: inner, stopping: &stopping}, &stopping
}

func (h *stopLog) Enabled(ctx context.Context, l slog.Level) bool { return h.inner.Enabled(ctx, l) }

func (h *stopLog) Handle(ctx context.Context, r slog.Record) error {
	if r.Level > slog.LevelDebug && h.stopping.Load() && chatter(r.Message) {
		if !h.inner.Enabled(ctx, slog.LevelDebug) {
			return nil
		}
		r.Level = slog.LevelDebug
	}
	return h.inner.Handle(ctx, r)
}

func (h *stopLog) WithAttrs(as []slog.Attr) slog.Handler {
	return &stopLog{inner: h.inner.WithAttrs(as), stopping: h.stopping}
}

func (h *stopLog) WithGroup(name string) slog.Handler {
	return &stopLog{inner: h.inner.WithGroup(name), stopping: h.stopping}
}

func chatter(msg string) bool {
	for _, p := range peerChatter {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}
