// Package testenv decides what a test does when the machine lacks what a
// fault test needs (root, network namespaces, Docker, a loop device). On a
// developer's machine such a test skips; under CI (RAFTQ_STRICT_FAULTS=1,
// set by .ci/run) a skip is a failure, so a green CI run has injected every
// fault it claims to.
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// StrictEnv is the variable that turns skips into failures.
const StrictEnv = "RAFTQ_STRICT_FAULTS"

// Strict reports whether missing prerequisites must fail tests.
func Strict() bool { return os.Getenv(StrictEnv) == "1" }

// SkipOrFail skips t with why, or fails it when Strict.
func SkipOrFail(t testing.TB, why string) {
	t.Helper()
	if Strict() {
		t.Fatalf("%s (%s=1: fault tests may not skip)", why, StrictEnv)
	}
	t.Skip(why)
}

// RequireRoot skips (or fails, under Strict) unless the test runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		SkipOrFail(t, "needs root")
	}
}

// RequireTools skips (or fails, under Strict) unless every tool is on PATH.
func RequireTools(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			SkipOrFail(t, "needs "+tool+" on PATH")
		}
	}
}
