package fsm

import (
	"fmt"

	"github.com/raftq/raftq/fsm/fsmpb"
	"google.golang.org/protobuf/proto"
)

// EntryVersion is the Entry format this FSM writes and applies.
const EntryVersion = 1

// EncodeEntry marshals an entry for a raft log. The entry must carry
// Version = EntryVersion: an unversioned entry would be refused by every
// replica, so it is refused here, before it is proposed.
func EncodeEntry(e *fsmpb.Entry) ([]byte, error) {
	if e.GetVersion() != EntryVersion {
		return nil, fmt.Errorf("encode entry: version %d, want %d", e.GetVersion(), EntryVersion)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode entry: %w", err)
	}
	return b, nil
}

// DecodeEntry unmarshals an entry and checks its version.
func DecodeEntry(b []byte) (*fsmpb.Entry, error) {
	e := &fsmpb.Entry{}
	if err := proto.Unmarshal(b, e); err != nil {
		return nil, fmt.Errorf("decode entry: %w", err)
	}
	if e.GetVersion() != EntryVersion {
		return nil, fmt.Errorf("decode entry: unknown version %d (this build applies %d)", e.GetVersion(), EntryVersion)
	}
	return e, nil
}
