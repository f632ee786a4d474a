package raftmux

import (
	"errors"
	"fmt"
	"io"
)

// The header every outgoing raft connection writes before any raft bytes:
//
//	magic   1 byte  0xA7 (not a printable byte, not a TLS/HTTP/gRPC preface)
//	version 1 byte  1
//	length  1 byte  n, 1..255
//	group   n bytes the group id as UTF-8, e.g. "meta" or "shard-3"
//
// The accept side reads exactly this many bytes before handing the connection
// to the group's StreamLayer, so raft's own framing starts right after it.
const (
	headerMagic   byte = 0xA7
	headerVersion byte = 1
	// MaxGroupLen bounds a group id so the header fits a one-byte length.
	MaxGroupLen = 255
)

var errBadHeader = errors.New("raftmux: bad connection header")

func encodeHeader(group string) ([]byte, error) {
	if err := validGroup(group); err != nil {
		return nil, err
	}
	b := make([]byte, 0, 3+len(group))
	b = append(b, headerMagic, headerVersion, byte(len(group)))
	return append(b, group...), nil
}

func validGroup(group string) error {
	if group == "" || len(group) > MaxGroupLen {
		return fmt.Errorf("raftmux: group id %q must be 1..%d bytes", group, MaxGroupLen)
	}
	return nil
}

// readHeader consumes exactly the header from r (no read-ahead, so raft's
// first bytes stay on the connection) and returns the group id.
func readHeader(r io.Reader) (string, error) {
	var fixed [3]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return "", fmt.Errorf("read header: %w", err)
	}
	if fixed[0] != headerMagic {
		return "", fmt.Errorf("%w: magic %#x", errBadHeader, fixed[0])
	}
	if fixed[1] != headerVersion {
		return "", fmt.Errorf("%w: version %d", errBadHeader, fixed[1])
	}
	n := int(fixed[2])
	if n == 0 {
		return "", fmt.Errorf("%w: empty group id", errBadHeader)
	}
	name := make([]byte, n)
	if _, err := io.ReadFull(r, name); err != nil {
		return "", fmt.Errorf("read group id: %w", err)
	}
	return string(name), nil
}
