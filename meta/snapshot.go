package meta

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/proto"

	"github.com/raftq/raftq/meta/metapb"
)

// SnapshotVersion is the snapshot format this FSM writes; Restore refuses
// others.
const SnapshotVersion = 1

// maxSnapshotBytes bounds what Restore reads: the meta state is queues and a
// shard map, far below this; a larger length means a corrupt file.
const maxSnapshotBytes = 256 << 20

// A snapshot is: magic "RQMS", version uint32, length uint32, then a
// metapb.Snapshot of that many bytes.
var snapshotMagic = [4]byte{'R', 'Q', 'M', 'S'}

func encodeSnapshot(s *metapb.Snapshot) ([]byte, error) {
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("meta snapshot encode: %w", err)
	}
	var buf bytes.Buffer
	buf.Grow(12 + len(body))
	buf.Write(snapshotMagic[:])
	_ = binary.Write(&buf, binary.BigEndian, uint32(SnapshotVersion))
	_ = binary.Write(&buf, binary.BigEndian, uint32(len(body)))
	buf.Write(body)
	return buf.Bytes(), nil
}

func decodeSnapshot(r io.Reader) (*metapb.Snapshot, error) {
	var hdr [12]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, fmt.Errorf("read header: %w", err)
	}
	if !bytes.Equal(hdr[:4], snapshotMagic[:]) {
		return nil, errors.New("not a meta snapshot")
	}
	if v := binary.BigEndian.Uint32(hdr[4:8]); v != SnapshotVersion {
		return nil, fmt.Errorf("snapshot version %d not supported", v)
	}
	n := binary.BigEndian.Uint32(hdr[8:12])
	if n > maxSnapshotBytes {
		return nil, fmt.Errorf("snapshot length %d too large", n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	var s metapb.Snapshot
	if err := proto.Unmarshal(body, &s); err != nil {
		return nil, fmt.Errorf("decode body: %w", err)
	}
	if s.GetVersion() != SnapshotVersion {
		return nil, fmt.Errorf("snapshot body version %d not supported", s.GetVersion())
	}
	return &s, nil
}

// DecodeSnapshot reads a meta snapshot (the bytes Snapshot persists, and a
// backup's meta piece).
func DecodeSnapshot(r io.Reader) (*metapb.Snapshot, error) { return decodeSnapshot(r) }

// EncodeSnapshot is the inverse of DecodeSnapshot.
func EncodeSnapshot(s *metapb.Snapshot) ([]byte, error) { return encodeSnapshot(s) }
