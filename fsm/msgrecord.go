package fsm

import (
	"errors"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// appendMessageRecord appends m encoded as an fsmpb.Message, byte for byte
// what deterministic proto.Marshal of m.toProto(true) writes: fields in
// number order, proto3 zero values left out, attributes in key order (the
// map's deterministic order), map entries with both key and value.
// A snapshot writes one per queued message, and building a Message to
// marshal it allocates per message, which for a large backlog was most of
// a snapshot's CPU on every replica (BenchmarkSnapshot).
// TestMessageRecordEncoding holds the two encoders to the same bytes, so
// Digest and restore see no change.
//
// A copy of a topic publication (m.publishedAs set) names the publication in
// body_of; with shared set, its body was written by an earlier record of
// the stream and is left out.
func appendMessageRecord(b []byte, m *msg, shared bool) ([]byte, error) {
	var err error
	b = appendUint(b, 1, m.id)
	if b, err = appendString(b, 2, m.q.name); err != nil {
		return b, err
	}
	if len(m.body) > 0 && !shared {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendBytes(b, m.body)
	}
	for _, a := range m.attrs {
		if !utf8.ValidString(a.k) || !utf8.ValidString(a.v) {
			return b, errInvalidUTF8
		}
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(mapEntrySize(a.k, a.v)))
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, a.k)
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, a.v)
	}
	for _, f := range [...]struct {
		num protowire.Number
		s   string
	}{{5, m.typ}, {6, m.group}, {7, m.dedupKey}} {
		if b, err = appendString(b, f.num, f.s); err != nil {
			return b, err
		}
	}
	b = appendUint(b, 8, uint64(m.priority))
	b = appendUint(b, 9, m.seq)
	b = appendInt(b, 10, m.enqueuedMs)
	b = appendInt(b, 11, m.availableMs)
	b = appendUint(b, 12, uint64(m.receiveCount))
	b = appendInt(b, 13, m.firstReceivedMs)
	b = appendInt(b, 14, m.lastReceivedMs)
	if b, err = appendString(b, 15, m.lastError); err != nil {
		return b, err
	}
	b = appendInt(b, 16, int64(m.state))
	b = appendUint(b, 17, m.leaseEpoch)
	b = appendInt(b, 18, m.leaseDeadline)
	b = appendUint(b, 19, m.leaseTerm)
	b = appendInt(b, 20, int64(m.deadReason))
	b = appendInt(b, 21, m.stateChangedMs)
	for i := range m.history {
		a := &m.history[i]
		if !utf8.ValidString(a.err) || !utf8.ValidString(a.consumer) {
			return b, errInvalidUTF8
		}
		b = protowire.AppendTag(b, 22, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(attemptSize(a)))
		b = appendUint(b, 1, a.epoch)
		b = appendInt(b, 2, a.receivedMs)
		b = appendInt(b, 3, a.endedMs)
		b = appendInt(b, 4, int64(a.outcome))
		b, _ = appendString(b, 5, a.err)
		b, _ = appendString(b, 6, a.consumer)
	}
	b = appendInt(b, 23, m.expireMs)
	if len(m.result) > 0 {
		b = protowire.AppendTag(b, 50, protowire.BytesType)
		b = protowire.AppendBytes(b, m.result)
	}
	if r := m.retry; r != nil {
		b = appendUint(b, 60, uint64(r.maxReceives))
		b = appendInt(b, 61, r.backoffBaseMs)
		b = appendInt(b, 62, r.backoffMaxMs)
	}
	b = appendUint(b, 70, m.publishedAs)
	if m.uniqueUntilDone {
		b = appendUint(b, 80, 1)
	}
	return b, nil
}

// errInvalidUTF8 is what proto.Marshal refuses too: a proto3 string field
// must hold UTF-8. Commands are checked on the way in, so it means a bug.
var errInvalidUTF8 = errors.New("string field contains invalid UTF-8")

func appendUint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// appendInt encodes int64, int32 and enum fields: negative values take ten
// bytes, as in proto.
func appendInt(b []byte, num protowire.Number, v int64) []byte {
	return appendUint(b, num, uint64(v))
}

func appendString(b []byte, num protowire.Number, s string) ([]byte, error) {
	if s == "" {
		return b, nil
	}
	if !utf8.ValidString(s) {
		return b, errInvalidUTF8
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s), nil
}

func mapEntrySize(k, v string) int {
	return 1 + protowire.SizeBytes(len(k)) + 1 + protowire.SizeBytes(len(v))
}

func attemptSize(a *attempt) int {
	n := uintSize(a.epoch) + uintSize(uint64(a.receivedMs)) + uintSize(uint64(a.endedMs)) + uintSize(uint64(int64(a.outcome)))
	for _, s := range [...]string{a.err, a.consumer} {
		if s != "" {
			n += 1 + protowire.SizeBytes(len(s))
		}
	}
	return n
}

// uintSize is a one-byte-tag varint field's size, 0 for a zero value.
func uintSize(v uint64) int {
	if v == 0 {
		return 0
	}
	return 1 + protowire.SizeVarint(v)
}
