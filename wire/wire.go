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
//
// A node run with TLS signs the receipts it hands out (Signed, with the
// id of the key in Key and the MAC in Sig) and settles only receipts it can
// verify; clients read the shard and pass the rest back untouched.
type Receipt struct {
	Shard uint32
	ID    uint64
	Epoch uint64
	Term  uint64

	Signed bool
	Key    uint32
	Sig    [SigLen]byte
}

// SigLen is the length of a receipt's MAC: 128 bits of HMAC-SHA256.
const SigLen = 16

// Receipt encodings: 1 unsigned, 2 signed (1's fields, the key id, then
// the MAC over everything before it).
const (
	receiptUnsigned = 1
	receiptSigned   = 2
)

// maxReceiptLen bounds an encoded receipt: a signed one with every field at
// its widest is 1+4*10+5+16 bytes, 83 characters of base64.
const maxReceiptLen = 96

// String encodes the receipt as unpadded base64url of a versioned varint
// record. Clients must treat it as opaque.
func (r Receipt) String() string {
	buf := r.SignedBytes()
	if r.Signed {
		buf = append(buf, r.Sig[:]...)
	}
	return base64.RawURLEncoding.EncodeToString(buf)
}

// SignedBytes is the part of the encoding a signature covers: the version,
// every field and, for a signed receipt, the key id.
func (r Receipt) SignedBytes() []byte {
	buf := make([]byte, 0, 1+5*binary.MaxVarintLen64+SigLen)
	if !r.Signed {
		buf = append(buf, receiptUnsigned)
	} else {
		buf = append(buf, receiptSigned)
	}
	buf = binary.AppendUvarint(buf, uint64(r.Shard))
	buf = binary.AppendUvarint(buf, r.ID)
	buf = binary.AppendUvarint(buf, r.Epoch)
	buf = binary.AppendUvarint(buf, r.Term)
	if r.Signed {
		buf = binary.AppendUvarint(buf, uint64(r.Key))
	}
	return buf
}

// ParseReceipt is the inverse of Receipt.String. It checks the form only:
// whether a signature is good is for the server to say.
func ParseReceipt(s string) (Receipt, error) {
	if s == "" || len(s) > maxReceiptLen {
		return Receipt{}, fmt.Errorf("%w: length %d", ErrBadReceipt, len(s))
	}
	buf, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(buf) == 0 || (buf[0] != receiptUnsigned && buf[0] != receiptSigned) {
		return Receipt{}, fmt.Errorf("%w: %q", ErrBadReceipt, s)
	}
	signed := buf[0] == receiptSigned
	buf = buf[1:]
	n := 4
	if signed {
		n = 5
	}
	fields := make([]uint64, n)
	for i := range fields {
		v, k := binary.Uvarint(buf)
		if k <= 0 {
			return Receipt{}, fmt.Errorf("%w: %q", ErrBadReceipt, s)
		}
		fields[i] = v
		buf = buf[k:]
	}
	r := Receipt{Shard: uint32(fields[0]), ID: fields[1], Epoch: fields[2], Term: fields[3], Signed: signed}
	if signed {
		if len(buf) != SigLen || fields[4] > 0xffffffff {
			return Receipt{}, fmt.Errorf("%w: %q", ErrBadReceipt, s)
		}
		r.Key = uint32(fields[4])
		copy(r.Sig[:], buf)
		buf = nil
	}
	if len(buf) != 0 || fields[0] > 0xffffffff || fields[1] == 0 || fields[2] == 0 {
		return Receipt{}, fmt.Errorf("%w: %q", ErrBadReceipt, s)
	}
	return r, nil
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
