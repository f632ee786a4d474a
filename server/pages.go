package server

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

// Page tokens are opaque to clients: base64url of a versioned cursor, so
// their form can change without breaking a client that only passes them
// back.

// maxPageBytes bounds one listing's answer below the client's 4 MiB
// receive limit (wire.MaxRequestBytes), leaving room for the envelope.
const maxPageBytes = 3 << 20

// deadCursor is where a dead-letter listing goes on: after the message
// (ms, shard, id) in the order (death time, shard, id).
type deadCursor struct {
	ms    int64
	shard uint32
	id    uint64
}

func (c deadCursor) token() string {
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "d1:%d:%d:%d", c.ms, c.shard, c.id))
}

func parseDeadToken(t string) (deadCursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(t)
	parts := strings.Split(string(b), ":")
	if err != nil || len(parts) != 4 || parts[0] != "d1" {
		return deadCursor{}, invalid("page_token %q is not one a ListDead answer gave", t)
	}
	ms, e1 := strconv.ParseInt(parts[1], 10, 64)
	shard, e2 := strconv.ParseUint(parts[2], 10, 32)
	id, e3 := strconv.ParseUint(parts[3], 10, 64)
	if e1 != nil || e2 != nil || e3 != nil {
		return deadCursor{}, invalid("page_token %q is not one a ListDead answer gave", t)
	}
	return deadCursor{ms: ms, shard: uint32(shard), id: id}, nil
}

// from is where shard's part of the next page starts, inclusive, in the
// shard's own (death time, id) order: messages of lower shards that died
// at the cursor's time came before it, those of higher shards after it.
func (c deadCursor) from(shard uint32) (ms int64, id uint64) {
	switch {
	case shard < c.shard:
		return c.ms + 1, 0
	case shard == c.shard:
		return c.ms, c.id + 1
	}
	return c.ms, 0
}

// before orders two listed dead messages: death time, then shard, then id.
func (c deadCursor) before(o deadCursor) bool {
	if c.ms != o.ms {
		return c.ms < o.ms
	}
	if c.shard != o.shard {
		return c.shard < o.shard
	}
	return c.id < o.id
}

func queuesToken(lastName string) string {
	return base64.RawURLEncoding.EncodeToString([]byte("q1:" + lastName))
}

func parseQueuesToken(t string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(t)
	name, ok := strings.CutPrefix(string(b), "q1:")
	if err != nil || !ok {
		return "", invalid("page_token %q is not one a ListQueues answer gave", t)
	}
	return name, nil
}
