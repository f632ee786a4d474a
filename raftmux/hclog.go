package raftmux

import (
	"bytes"
	"context"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// HCLogger bridges hashicorp's hclog (used by raft and its transport) to
// slog. Raft logs every heartbeat failure and election at info, which floods
// a multi-group node, so only warnings and errors pass.
func HCLogger(l *slog.Logger, name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:            name,
		Level:           hclog.Warn,
		Output:          slogWriter{l: l},
		DisableTime:     true,
		IncludeLocation: false,
	})
}

// slogWriter receives one formatted hclog line per Write and re-emits it at
// the level hclog printed.
type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	line := bytes.TrimSpace(p)
	level := slog.LevelWarn
	switch {
	case bytes.HasPrefix(line, []byte("[ERROR]")):
		level = slog.LevelError
		line = bytes.TrimSpace(line[len("[ERROR]"):])
	case bytes.HasPrefix(line, []byte("[WARN] ")):
		line = bytes.TrimSpace(line[len("[WARN] "):])
	}
	if bytes.Contains(line, gatedText) {
		// The replica's own gate dropped the RPC: whoever holds the gate
		// logged why, once; raft would repeat it every election timeout.
		level = slog.LevelDebug
	}
	w.l.Log(context.Background(), level, string(line))
	return len(p), nil
}

var gatedText = []byte(ErrGated.Error())
