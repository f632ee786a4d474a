package raftgroup

import (
	"io"
	"log/slog"
	"os"
)

func testLogger() *slog.Logger {
	if os.Getenv("RAFTGROUP_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
