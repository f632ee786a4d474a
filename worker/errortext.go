package worker

import "strings"

// maxErrorText is the most error text a node keeps with a nack or
// dead-letter (fsm.MaxErrorLen, fsm/limits.go); it refuses a longer one.
const maxErrorText = 1024

// errorText makes a handler's error text one the node takes: valid UTF-8
// (a proto string must be) and at most maxErrorText bytes, cut at a
// character. Refused, the settle would fail, and the job would come back
// only when its lease ran out, using an attempt with no error recorded.
func errorText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= maxErrorText {
		return s
	}
	n := maxErrorText
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
