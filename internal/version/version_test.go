package version

import (
	"bytes"
	"runtime/debug"
	"strings"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	for _, tc := range []struct {
		name string
		bi   debug.BuildInfo
		want Info
	}{
		{"tagged", debug.BuildInfo{GoVersion: "go1.25.1", Main: debug.Module{Version: "v1.2.0"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "false"}}},
			Info{"v1.2.0", "abc123", "go1.25.1"}},
		{"dirty checkout", debug.BuildInfo{GoVersion: "go1.25.1", Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}}},
			Info{"(devel)", "abc123-dirty", "go1.25.1"}},
		{"no vcs", debug.BuildInfo{GoVersion: "go1.25.1"}, Info{"unknown", "unknown", "go1.25.1"}},
	} {
		if got := fromBuildInfo(&tc.bi); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestPrintAndRequested(t *testing.T) {
	var b bytes.Buffer
	Print(&b, "raftq-node")
	out := b.String()
	if !strings.HasPrefix(out, "raftq-node ") || !strings.Contains(out, "(commit ") || !strings.HasSuffix(out, ")\n") {
		t.Fatalf("Print wrote %q", out)
	}
	for args, want := range map[string]bool{"--version": true, "-version": true, "--help": false, "": false} {
		if got := Requested(strings.Fields(args)); got != want {
			t.Errorf("Requested(%q) = %v, want %v", args, got, want)
		}
	}
}
