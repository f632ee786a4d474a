package cluster

import (
	"bytes"
	"context"
	"log/slog"
)

// logBridge turns memberlist's "[LEVEL] memberlist: text" lines into slog
// records. Memberlist chatters at DEBUG and INFO (every probe, every join);
// both go to slog's Debug so a node's log stays quiet.
type logBridge struct{ logger *slog.Logger }

func (b logBridge) Write(p []byte) (int, error) {
	line := bytes.TrimSpace(p)
	level := slog.LevelDebug
	for _, l := range []struct {
		tag   string
		level slog.Level
	}{{"[ERR]", slog.LevelError}, {"[ERROR]", slog.LevelError}, {"[WARN]", slog.LevelWarn}, {"[INFO]", slog.LevelDebug}, {"[DEBUG]", slog.LevelDebug}} {
		if i := bytes.Index(line, []byte(l.tag)); i >= 0 {
			level = l.level
			line = bytes.TrimSpace(line[i+len(l.tag):])
			break
		}
	}
	b.logger.Log(context.Background(), level, string(line))
	return len(p), nil
}
