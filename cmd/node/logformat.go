package main

import (
	"fmt"
	"io"
	"log/slog"
)

// checkLogFormat refuses a --log-format the node cannot write.
func checkLogFormat(f string) error {
	if f != "text" && f != "json" {
		return fmt.Errorf("--log-format %q: want text or json", f)
	}
	return nil
}

// logHandler is the node's log handler for --log-format: slog's text
// handler, or its JSON handler writing one object per line for log
// shippers. stoplog.go wraps either.
func logHandler(format string, w io.Writer, level slog.Level) slog.Handler {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.NewJSONHandler(w, opts)
	}
	return slog.NewTextHandler(w, opts)
}
