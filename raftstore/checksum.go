package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/hashicorp/raft"
)

// Entry checksums live in raft.Log.Extensions, which raft replicates with
// the entry and hands to the FSM, but never interprets.
//
//	end-to-end block: tagE2E | crc32c(type, data)      made by the leader at proposal
//	local block:      tagLocal | crc32c(index, term, type, data, extensions)
//
// The end-to-end block travels with the entry: every replica checks it when
// it stores the entry and before it applies it, so bytes damaged anywhere
// between the proposer and the FSM are never applied. The local block is
// added by this replica's log store when it writes the entry and removed
// when it reads it back; it also covers the index and term, which raft
// trusts on read, and raft's own entries (configuration, no-op, barrier),
// which carry no end-to-end block.
const (
	tagE2E    byte = 0xe2
	tagLocal  byte = 0x1c
	blockSize      = 5 // tag + crc32c
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrChecksum is wrapped by every checksum mismatch.
var ErrChecksum = errors.New("checksum mismatch")

// Command returns a LogCommand entry for data with its end-to-end checksum,
// for raft.ApplyLog. Every command proposed through raft must be made here:
// a command without the block is refused by every replica.
func Command(data []byte) raft.Log {
	return raft.Log{Type: raft.LogCommand, Data: data, Extensions: e2eBlock(raft.LogCommand, data)}
}

func e2eBlock(t raft.LogType, data []byte) []byte {
	b := make([]byte, blockSize)
	b[0] = tagE2E
	c := crc32.Update(0, castagnoli, []byte{byte(t)})
	binary.LittleEndian.PutUint32(b[1:], crc32.Update(c, castagnoli, data))
	return b
}

// VerifyEntry checks an entry as raft hands it to the FSM or to a follower
// (local block already removed): a LogCommand must carry a matching
// end-to-end block; other entry types carry none.
func VerifyEntry(l *raft.Log) error {
	if l.Type != raft.LogCommand {
		if len(l.Extensions) != 0 {
			return fmt.Errorf("%w: index %d term %d: %s entry carries %d bytes of extensions", ErrChecksum, l.Index, l.Term, l.Type, len(l.Extensions))
		}
		return nil
	}
	if len(l.Extensions) != blockSize || l.Extensions[0] != tagE2E {
		return fmt.Errorf("%w: index %d term %d: command entry without its end-to-end checksum", ErrChecksum, l.Index, l.Term)
	}
	want := e2eBlock(l.Type, l.Data)
	if got := binary.LittleEndian.Uint32(l.Extensions[1:]); got != binary.LittleEndian.Uint32(want[1:]) {
		return fmt.Errorf("%w: index %d term %d: command of %d bytes has crc32c %08x, the leader made %08x",
			ErrChecksum, l.Index, l.Term, len(l.Data), binary.LittleEndian.Uint32(want[1:]), got)
	}
	return nil
}

// seal returns a copy of l with the local block appended to its
// extensions; l is not changed (raft's log cache holds it).
func seal(l *raft.Log) *raft.Log {
	c := *l
	ext := make([]byte, len(l.Extensions), len(l.Extensions)+blockSize)
	copy(ext, l.Extensions)
	ext = append(ext, tagLocal, 0, 0, 0, 0)
	binary.LittleEndian.PutUint32(ext[len(ext)-4:], localSum(&c, ext[:len(ext)-blockSize]))
	c.Extensions = ext
	return &c
}

// unseal checks and removes the local block of an entry read back from the
// log store at index; the entry is then checked end to end.
func unseal(index uint64, l *raft.Log) error {
	if l.Index != index {
		return fmt.Errorf("%w: asked for index %d, the log store returned index %d", ErrChecksum, index, l.Index)
	}
	n := len(l.Extensions)
	if n < blockSize || l.Extensions[n-blockSize] != tagLocal {
		return fmt.Errorf("%w: index %d term %d: entry without its local checksum (written by an older raftq, or damaged)", ErrChecksum, l.Index, l.Term)
	}
	rest := l.Extensions[:n-blockSize]
	if got, want := binary.LittleEndian.Uint32(l.Extensions[n-4:]), localSum(l, rest); got != want {
		return fmt.Errorf("%w: index %d term %d: stored entry has crc32c %08x, it was written with %08x", ErrChecksum, l.Index, l.Term, want, got)
	}
	if len(rest) == 0 {
		rest = nil
	}
	l.Extensions = rest
	return VerifyEntry(l)
}

func localSum(l *raft.Log, ext []byte) uint32 {
	var hdr [17]byte
	binary.LittleEndian.PutUint64(hdr[0:], l.Index)
	binary.LittleEndian.PutUint64(hdr[8:], l.Term)
	hdr[16] = byte(l.Type)
	c := crc32.Update(0, castagnoli, hdr[:])
	c = crc32.Update(c, castagnoli, l.Data)
	return crc32.Update(c, castagnoli, ext)
}
