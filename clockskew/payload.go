package clockskew

import (
	"encoding/binary"
	"errors"
	"time"
)

// payloadVersion tags the probe-ack payload, so a later format can be told
// apart; an unknown version is ignored, not misread.
const payloadVersion = 1

// PayloadLen is the size of an encoded clock reading.
const PayloadLen = 9

// EncodeClock is the payload a node appends to its probe acks: its wall
// clock (the clock it stamps raft entries with) in Unix nanoseconds.
func EncodeClock(now time.Time) []byte {
	b := make([]byte, PayloadLen)
	b[0] = payloadVersion
	binary.BigEndian.PutUint64(b[1:], uint64(now.UnixNano()))
	return b
}

// ErrNoClock: the payload carries no clock reading this version knows (an
// older node sends none).
var ErrNoClock = errors.New("clockskew: ack carries no clock reading")

// DecodeClock reads a payload made by EncodeClock.
func DecodeClock(b []byte) (time.Time, error) {
	if len(b) != PayloadLen || b[0] != payloadVersion {
		return time.Time{}, ErrNoClock
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(b[1:]))), nil
}
