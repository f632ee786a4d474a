package fsm

import (
	"runtime/debug"
	"strings"
)

// BinaryVersion names the running binary for a fail-stop message: the main
// module's version and, when the toolchain recorded them, the VCS revision
// and whether the tree was modified. raftq-node has no version flag of its
// own; the build info is what `go version -m` prints for the same binary.
func BinaryVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown (no build info)"
	}
	parts := []string{bi.Main.Path + "@" + bi.Main.Version}
	for _, s := range bi.Settings {
		switch {
		case s.Key == "vcs.revision":
			parts = append(parts, "rev "+s.Value)
		case s.Key == "vcs.modified" && s.Value == "true":
			parts = append(parts, "modified")
		}
	}
	return strings.Join(parts, " ")
}
