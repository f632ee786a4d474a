// Package version says which build of raftq a binary is, from the
// information the Go toolchain stamps into it (runtime/debug.ReadBuildInfo):
// the module version, the VCS revision and the Go version. Every raftq
// binary prints it for --version and the node exports it as
// raftq_build_info.
package version

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// Info identifies a build.
type Info struct {
	// Version is the main module's version: a tag such as v1.2.0 for
	// `go install ...@v1.2.0`, a pseudo-version, or "(devel)" for a build
	// from a checkout.
	Version string
	// Commit is the VCS revision the binary was built from, with
	// "-dirty" when the work tree had changes; "unknown" when the build
	// did not record it (go test, go run, -buildvcs=false).
	Commit string
	// GoVersion is the Go toolchain that built the binary.
	GoVersion string
}

// Get reads the running binary's build information.
func Get() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Version: "unknown", Commit: "unknown", GoVersion: runtime.Version()}
	}
	return fromBuildInfo(bi)
}

func fromBuildInfo(bi *debug.BuildInfo) Info {
	in := Info{Version: bi.Main.Version, Commit: "unknown", GoVersion: bi.GoVersion}
	if in.Version == "" {
		in.Version = "unknown"
	}
	if in.GoVersion == "" {
		in.GoVersion = runtime.Version()
	}
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Commit = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && in.Commit != "unknown" {
		in.Commit += "-dirty"
	}
	return in
}

// String is the line --version prints, without the binary's name.
func (in Info) String() string {
	return fmt.Sprintf("%s (commit %s, %s)", in.Version, in.Commit, in.GoVersion)
}

// Print writes "<name> <version> (commit <commit>, <go version>)" and a
// newline: what every raftq binary prints for --version.
func Print(w io.Writer, name string) {
	fmt.Fprintf(w, "%s %s\n", name, Get())
}

// Requested reports whether args ask only for the version: the first
// argument is --version or -version. The binaries check it before parsing
// their flags, so --version works whatever else they require.
func Requested(args []string) bool {
	return len(args) > 0 && (args[0] == "--version" || args[0] == "-version")
}
