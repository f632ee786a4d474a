// Package wire holds the vocabulary that clients and servers must agree on
// byte for byte: the public form of message ids and receipt handles, and the
// stable hash that places a (queue, message group) on a shard. It has no
// dependencies beyond the standard library so the client SDK stays light.
package wire

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrBadID and ErrBadReceipt mark malformed client input; servers map them to
// InvalidArgument.
var (
	ErrBadID      = errors.New("malformed message id")
	ErrBadReceipt = errors.New("malformed receipt handle")
)

// MessageID names one message cluster-wide: the shard that owns it and the
// shard-local id the FSM assigned.
type MessageID struct {
	Shard uint32
	ID    uint64
}

// String renders "<shard>-<id>" in lower-case hex, e.g. "3-1f4".
func (m MessageID) String() string {
	return strconv.FormatUint(uint64(m.Shard), 16) + "-" + strconv.FormatUint(m.ID, 16)
}

// ParseMessageID is the inverse of MessageID.String.
func ParseMessageID(s string) (MessageID, error) {
	shard, id, ok := strings.Cut(s, "-")
	if !ok || shard == "" || id == "" {
		return MessageID{}, fmt.Errorf("%w: %q", ErrBadID, s)
	}
	sh, err := strconv.ParseUint(shard, 16, 32)
	if err != nil {
		return MessageID{}, fmt.Errorf("%w: %q", ErrBadID, s)
	}
	n, err := strconv.ParseUint(id, 16, 64)
	if err != nil || n == 0 {
		return MessageID{}, fmt.Errorf("%w: %q", ErrBadID, s)
	}
	return MessageID{Shard: uint32(sh), ID: n}, nil
}

// Receipt is a lease handle: the message and the lease epoch it was granted
// with. Term is the raft term of the granting leader, carried for diagnostics;
// the FSM fences on Epoch alone, which is unique per shard and only grows.
type Receipt struct {
	Shard uint32
	ID    uint64
	Epoch uint64
	Term  uint64
}

const receiptVersion = 1

// String encodes the receipt as unpadded base64url of a versioned varint
// record. Clients must treat it as opaque.
func (r Receipt) String() string {
	buf := make([]byte, 0, 1+4*binary.MaxVarintLen64)
	buf = append(buf, receiptVersion)
	buf = binary.AppendUvarint(buf, uint64(r.Shard))
	buf = binary.AppendUvarint(buf, r.ID)
	buf = binary.AppendUvarint(buf, r.Epoch)
	buf = binary.AppendUvarint(buf, r.Term)
	return base64.RawURLEncoding.EncodeToString(buf)
}

// ParseReceipt is the inverse of Receipt.String.
func ParseReceipt(s string) (Receipt, error) {
	if s == "" || len(s) > 64 {
		return Receipt{}, fmt.Errorf("%w: length %d", ErrBadReceipt, len(s))
	}
	buf, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(buf) == 0 || buf[0] != receiptVersion {
		return Receipt{}, fmt.Errorf("%w: %q", ErrBadReceipt, s)
	}
	buf = buf[1:]
	var fields [4]uint64
	for i := range fields {
		v, n := binary.Uvarint(buf)
		if n <= 0 {
			return Receipt{}, fmt.Errorf("%w: %q", ErrBadReceipt, s)
		}
		fields[i] = v
		buf = buf[n:]
	}
	if len(buf) != 0 || fields[0] > 0xffffffff || fields[1] == 0 || fields[2] == 0 {
		return Receipt{}, fmt.Errorf("%w: %q", ErrBadReceipt, s)
	}
	return Receipt{Shard: uint32(fields[0]), ID: fields[1], Epoch: fields[2], Term: fields[3]}, nil
}

// ShardFor places a message group of a queue on one of n shards by the
// plain hash: the placement of a cluster whose slots are still in their
// bootstrap layout (SlotTable).
func ShardFor(queue, group string, n uint32) uint32 {
	if n == 0 {
		return 0
	}
	return uint32(routingHash(queue, group) % uint64(n))
}

// ShardForMessage picks the shard a new message must go to in a cluster of
// n shards in the bootstrap layout, if any. A grouped message goes to its
// group's shard (order). An ungrouped message with a dedup key goes to a
// shard fixed by the key, because dedup state is per shard: two sends with
// one key must meet on one shard. Otherwise ok is false and the sender may
// pick any shard (balance). A cluster whose shard count grew places
// through its SlotTable instead.
func ShardForMessage(queue, group, dedupKey string, n uint32) (shard uint32, ok bool) {
	switch {
	case group != "":
		return ShardFor(queue, group, n), true
	case dedupKey != "":
		return ShardFor(queue, dedupDomain+dedupKey, n), true
	default:
		return 0, false
	}
}
