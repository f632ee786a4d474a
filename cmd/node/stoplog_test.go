package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// Once the node is stopping, raft's, its transport's and gossip's
// complaints about peers going away drop to debug; the node's own lines and
// raft-wal's keep their level, and nothing changes before the stop.
func TestStopLogQuietsPeerChatterOnlyWhileStopping(t *testing.T) {
	var buf bytes.Buffer
	h, stopping := newStopLog(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	log := slog.New(h).With("node", "n1")
	log.Error("raft: failed to make requestVote RPC: error=EOF")
	stopping.Store(true)
	log.Error("raft-net: failed to decode incoming command: use of closed network connection")
	log.Warn("raft: failed to contact: server-id=n2")
	log.Warn("memberlist: Refuting a suspect message")
	log.Error("raft-wal: sync failed")
	log.Warn("could not settle")
	out := buf.String()
	for _, want := range []string{`level=ERROR msg="raft: failed to make requestVote`, `level=ERROR msg="raft-wal: sync failed"`, `level=WARN msg="could not settle"`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	for _, gone := range []string{"decode incoming", "failed to contact", "Refuting"} {
		if strings.Contains(out, gone) {
			t.Errorf("peer chatter %q logged at info or above while stopping:\n%s", gone, out)
		}
	}
	// At debug level the demoted lines are still there, as debug.
	buf.Reset()
	h, stopping = newStopLog(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	stopping.Store(true)
	slog.New(h).Error("raft-net: failed to decode incoming command")
	if !strings.Contains(buf.String(), `level=DEBUG msg="raft-net: failed to decode`) {
		t.Errorf("demoted line at debug level: %q", buf.String())
	}
}
