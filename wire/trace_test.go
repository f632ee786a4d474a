package wire

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckTraceAttributes(t *testing.T) {
	const good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	cases := []struct {
		name  string
		attrs map[string]string
		ok    bool
	}{
		{"no trace attributes", map[string]string{"k": "v"}, true},
		{"nil map", nil, true},
		{"version 00", map[string]string{AttrTraceParent: good}, true},
		{"with tracestate", map[string]string{AttrTraceParent: good, AttrTraceState: "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"}, true},
		{"later version with more fields", map[string]string{AttrTraceParent: "cc" + good[2:] + "-what-the-future-holds"}, true},
		{"empty traceparent", map[string]string{AttrTraceParent: ""}, false},
		{"short", map[string]string{AttrTraceParent: good[:54]}, false},
		{"version 00 too long", map[string]string{AttrTraceParent: good + "-x"}, false},
		{"later version, no dash after flags", map[string]string{AttrTraceParent: "cc" + good[2:] + "x"}, false},
		{"upper-case hex", map[string]string{AttrTraceParent: strings.ToUpper(good)}, false},
		{"version ff", map[string]string{AttrTraceParent: "ff" + good[2:]}, false},
		{"zero trace id", map[string]string{AttrTraceParent: "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}, false},
		{"zero parent id", map[string]string{AttrTraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"}, false},
		{"wrong separators", map[string]string{AttrTraceParent: strings.ReplaceAll(good, "-", "_")}, false},
		{"too long", map[string]string{AttrTraceParent: "cc" + good[2:] + "-" + strings.Repeat("a", MaxTraceParentLen)}, false},
		{"tracestate at its limit", map[string]string{AttrTraceState: strings.Repeat("a", MaxTraceStateLen)}, true},
		{"tracestate past its limit", map[string]string{AttrTraceState: strings.Repeat("a", MaxTraceStateLen+1)}, false},
		{"tracestate with a control byte", map[string]string{AttrTraceState: "a=b\n"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckTraceAttributes(tc.attrs)
			if tc.ok && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tc.ok && !errors.Is(err, ErrBadTraceContext) {
				t.Fatalf("got %v, want ErrBadTraceContext", err)
			}
		})
	}
}
