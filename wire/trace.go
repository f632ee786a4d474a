package wire

import (
	"errors"
	"fmt"
)

// Message attributes reserved for W3C trace context (docs/tracing.md). A
// tracing client writes them on send and a tracing worker reads them, so a
// handler's span continues the trace of the send that made its message.
// They are ordinary attributes otherwise: they count against
// MaxAttributes and MaxAttributesBytes like any other (the replicated
// log's checks know no exemptions), and copies of a message (a redrive, a
// schedule's firings) keep them as they are.
const (
	AttrTraceParent = "traceparent"
	AttrTraceState  = "tracestate"
)

// Attribute limits of one message, as the replicated log enforces them
// (the client checks before adding trace context, so tracing never makes a
// valid send invalid).
const (
	MaxAttributes      = 64
	MaxAttributesBytes = 16 << 10
)

// Bounds of the reserved attributes' values. W3C Trace Context asks that
// a tracestate of up to 512 characters be carried whole; a traceparent of
// version 00 is exactly 55, later versions may append fields.
const (
	MaxTraceParentLen = 256
	MaxTraceStateLen  = 512
)

// ErrBadTraceContext marks a reserved trace attribute whose value is not
// W3C trace context. Nodes store such values as sent (they are ordinary
// attributes to the replicated log); a tracing client leaves them out.
var ErrBadTraceContext = errors.New("malformed trace context attribute")

// CheckTraceAttributes reports reserved trace attributes that are not well
// formed W3C trace context, so a tracing client never writes one a worker
// would not continue; attributes without them pass.
func CheckTraceAttributes(attrs map[string]string) error {
	if tp, ok := attrs[AttrTraceParent]; ok {
		if err := checkTraceParent(tp); err != nil {
			return fmt.Errorf("%w: %s %q: %v", ErrBadTraceContext, AttrTraceParent, clip(tp), err)
		}
	}
	if ts, ok := attrs[AttrTraceState]; ok {
		if len(ts) > MaxTraceStateLen {
			return fmt.Errorf("%w: %s is %d bytes, limit %d", ErrBadTraceContext, AttrTraceState, len(ts), MaxTraceStateLen)
		}
		for i := 0; i < len(ts); i++ {
			if ts[i] < 0x20 || ts[i] > 0x7e {
				return fmt.Errorf("%w: %s holds byte 0x%02x at %d (printable ASCII only)", ErrBadTraceContext, AttrTraceState, ts[i], i)
			}
		}
	}
	return nil
}

// checkTraceParent checks version-traceid-parentid-flags: two, 32, 16 and
// two lower-case hex digits; ids not all zero; version ff invalid; only
// versions after 00 may carry more fields after a dash.
func checkTraceParent(s string) error {
	if len(s) > MaxTraceParentLen {
		return fmt.Errorf("%d bytes, limit %d", len(s), MaxTraceParentLen)
	}
	if len(s) < 55 {
		return errors.New("want version-traceid-parentid-flags, 55 characters")
	}
	if s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return errors.New("want version-traceid-parentid-flags separated by dashes")
	}
	for _, f := range [][2]int{{0, 2}, {3, 35}, {36, 52}, {53, 55}} {
		if !lowerHex(s[f[0]:f[1]]) {
			return errors.New("fields must be lower-case hex")
		}
	}
	switch {
	case s[:2] == "ff":
		return errors.New("version ff is invalid")
	case s[:2] == "00" && len(s) != 55:
		return errors.New("version 00 is exactly 55 characters")
	case len(s) > 55 && s[55] != '-':
		return errors.New("fields after flags must follow a dash")
	case allZero(s[3:35]):
		return errors.New("trace id is all zeros")
	case allZero(s[36:52]):
		return errors.New("parent id is all zeros")
	}
	return nil
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func allZero(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] != '0' {
			return false
		}
	}
	return true
}

// clip keeps an error message short whatever the value's length.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
