// Package bufpool builds the gRPC buffer pool raftq's servers and clients
// use for incoming messages and for marshalling outgoing ones.
package bufpool

import (
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
)

// Tiers: one at every power of two from 256 B to 4 MiB. Larger messages
// (up to the 64 MiB call limit) use gRPC's unpooled fallback.
//
// gRPC's default pool has tiers of 256 B, 4, 16 and 32 KiB and 1 MiB, and
// clears a buffer's whole capacity on every Get. Every message between
// 32 KiB and 1 MiB therefore costs a 1 MiB memclr on the side that reads
// it and on the side that marshals it. raftq's calls are mostly in that
// range (a coalesced SendBatch of 42 KiB, a Receive answer of up to
// 256 KiB), and below the ceiling there are more and smaller calls, so
// the clearing is a visible share of both the leader's and the client's
// CPU, the more so the lower the load. With a tier at every power of two a
// buffer is at most twice its message, and clearing it costs about what
// copying the message does.
const (
	minExp = 8
	maxExp = 22
)

// New returns a fresh pool. Give each server or client its own: the pool
// is a set of sync.Pools and holds nothing but free buffers.
func New() mem.BufferPool {
	exps := make([]uint8, 0, maxExp-minExp+1)
	for e := uint8(minExp); e <= maxExp; e++ {
		exps = append(exps, e)
	}
	p, err := mem.NewBinaryTieredBufferPool(exps...)
	if err != nil {
		// The exponents are constants within gRPC's accepted range.
		panic(fmt.Sprintf("bufpool: %v", err))
	}
	return p
}

// ServerOption makes a gRPC server use a new pool.
func ServerOption() grpc.ServerOption { return experimental.BufferPool(New()) }

// DialOption makes a gRPC client connection use a new pool.
func DialOption() grpc.DialOption { return experimental.WithBufferPool(New()) }
