package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// A payload carries who sent it and when, so the ledger can tell loss from
// duplication exactly and the consumer can time send -> receive without a
// side table. Layout (little endian): magic u32, producer u32, seq u64,
// sent unix ns i64, then filler up to the body size.
const (
	payloadMagic  = 0x72716231 // "rqb1"
	payloadHeader = 24
)

// minBodySize is the smallest body that holds the header.
const minBodySize = payloadHeader

var errNotBench = errors.New("not a raftq-bench payload")

// header identifies one message of one producer.
type header struct {
	Producer uint32
	Seq      uint64
	Sent     time.Time
}

// filler is the deterministic padding for a run: the same seed gives the
// same bytes, so two runs send identical bodies.
func filler(seed uint64, size int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, size)
	for i := range b {
		b[i] = byte('a' + r.IntN(26)) // printable: easy to inspect with the CLI
	}
	return b
}

// encode builds a body of len(fill) bytes (at least the header).
func encode(h header, fill []byte) []byte {
	b := make([]byte, max(len(fill), payloadHeader))
	copy(b[payloadHeader:], fill[min(len(fill), payloadHeader):])
	putHeader(b, h)
	return b
}

// encodeInto reuses buf, a body encode made for this fill whose send has
// completed, writing only the header: its filler is already in place. Any
// other buf gets a new body. A body made and zeroed per send would be CPU
// taken from the nodes the load generator shares its cores with.
func encodeInto(buf []byte, h header, fill []byte) []byte {
	if len(buf) != max(len(fill), payloadHeader) {
		return encode(h, fill)
	}
	putHeader(buf, h)
	return buf
}

func putHeader(b []byte, h header) {
	binary.LittleEndian.PutUint32(b[0:], payloadMagic)
	binary.LittleEndian.PutUint32(b[4:], h.Producer)
	binary.LittleEndian.PutUint64(b[8:], h.Seq)
	binary.LittleEndian.PutUint64(b[16:], uint64(h.Sent.UnixNano()))
}

func decode(b []byte) (header, error) {
	if len(b) < payloadHeader || binary.LittleEndian.Uint32(b) != payloadMagic {
		return header{}, fmt.Errorf("decode %d-byte body: %w", len(b), errNotBench)
	}
	return header{
		Producer: binary.LittleEndian.Uint32(b[4:]),
		Seq:      binary.LittleEndian.Uint64(b[8:]),
		Sent:     time.Unix(0, int64(binary.LittleEndian.Uint64(b[16:]))),
	}, nil
}
