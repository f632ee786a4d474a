package worker

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestErrorText(t *testing.T) {
	for name, in := range map[string]string{
		"short":        "boom",
		"long":         strings.Repeat("x", 5000),
		"long runes":   strings.Repeat("é", 1000), // 2000 bytes; a cut mid-rune would break it
		"invalid utf8": "bad \xff\xfe bytes",
	} {
		got := errorText(in)
		if len(got) > maxErrorText || !utf8.ValidString(got) {
			t.Errorf("%s: %d bytes, valid %v", name, len(got), utf8.ValidString(got))
		}
		if len(in) <= maxErrorText && utf8.ValidString(in) && got != in {
			t.Errorf("%s: changed a text the node takes: %q", name, got)
		}
	}
}
