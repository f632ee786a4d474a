package main

import (
	"os"
	"path/filepath"
	"testing"
)

// Only a run that failed (or did not finish) keeps its directory, unless
// asked to keep every run's.
func TestRetainRunKeepsOnlyFailedRuns(t *testing.T) {
	for _, c := range []struct {
		passed, keepAll, kept bool
	}{{true, false, false}, {false, false, true}, {true, true, true}, {false, true, true}} {
		dir := filepath.Join(t.TempDir(), "run")
		if err := os.MkdirAll(filepath.Join(dir, "n1"), 0o755); err != nil {
			t.Fatal(err)
		}
		retainRun(dir, c.passed, c.keepAll)
		if _, err := os.Stat(dir); (err == nil) != c.kept {
			t.Errorf("passed %v keep-passed %v: directory kept %v, want %v", c.passed, c.keepAll, err == nil, c.kept)
		}
	}
}
