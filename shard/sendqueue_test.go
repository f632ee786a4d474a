package shard

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// The send queue refuses at once past its byte bound, and once sends have
// waited for the proposer longer than maxSendQueueWait; a taken send
// frees its bytes and renews the queue's age.
func TestSendQueueBounds(t *testing.T) {
	s := admitShard()
	s.cfg.ID = 3
	s.cfg.maxQueuedSend = 1000
	now := time.Unix(1000, 0)
	if err := s.admitQueuedSend(600, now); err != nil {
		t.Fatalf("first send: %v", err)
	}
	if err := s.admitQueuedSend(400, now); err != nil {
		t.Fatalf("a send filling the bound exactly: %v", err)
	}
	err := s.admitQueuedSend(1, now)
	var ovl *OverloadError
	if !errors.As(err, &ovl) || !errors.Is(err, ErrOverloaded) || ovl.Shard != 3 || ovl.RetryAfter != sendQueueRetry ||
		!strings.Contains(err.Error(), "1000 bytes of sends already wait") {
		t.Fatalf("one byte past the bound: %v", err)
	}
	s.tookSend(&proposal{size: 600})
	if err := s.admitQueuedSend(500, time.Now()); err != nil {
		t.Fatalf("after the proposer took 600 bytes: %v", err)
	}
	// Nothing taken for longer than the wait bound: refused whatever its size.
	if err := s.admitQueuedSend(1, time.Now().Add(maxSendQueueWait+time.Second)); !errors.Is(err, ErrOverloaded) || !strings.Contains(err.Error(), "no queued send was proposed") {
		t.Fatalf("a stalled proposer: %v", err)
	}
	// A send larger than the bound still goes alone into an empty queue,
	// or no send that large could ever be proposed.
	e := admitShard()
	e.cfg.maxQueuedSend = 10
	if err := e.admitQueuedSend(100, now); err != nil {
		t.Fatalf("a large send into an empty queue: %v", err)
	}
}
