package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

// --log-format json writes one JSON object per line, through the stop-time
// filter like the text format, with the node's attributes as fields.
func TestLogFormatJSONWritesJSONLines(t *testing.T) {
	var buf bytes.Buffer
	h, stopping := newStopLog(logHandler("json", &buf, slog.LevelInfo))
	log := slog.New(h).With("node", "n1")
	log.Info("raftq-node started", "grpc", "127.0.0.1:7101")
	log.Debug("below the level")
	stopping.Store(true)
	log.Warn("raft: failed to contact: server-id=n2") // quieted while stopping
	log.Error("stopping", "err", "disk")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), buf.String())
	}
	var first, second map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatalf("line 1 %q: %v", lines[0], err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &second); err != nil {
		t.Fatalf("line 2 %q: %v", lines[1], err)
	}
	if first["msg"] != "raftq-node started" || first["node"] != "n1" || first["grpc"] != "127.0.0.1:7101" || first["level"] != "INFO" {
		t.Errorf("line 1 = %v", first)
	}
	if second["level"] != "ERROR" || second["err"] != "disk" {
		t.Errorf("line 2 = %v", second)
	}
	var text bytes.Buffer
	slog.New(logHandler("text", &text, slog.LevelInfo)).Info("hello")
	if !strings.Contains(text.String(), "level=INFO msg=hello") {
		t.Errorf("text format wrote %q", text.String())
	}
}
