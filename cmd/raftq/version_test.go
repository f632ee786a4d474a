package main

import (
	"strings"
	"testing"
)

// --version answers without a cluster, whatever the environment holds.
func TestVersionFlag(t *testing.T) {
	r := raftq(t, "127.0.0.1:1", "", "--version")
	if r.code != exitOK || !strings.HasPrefix(r.stdout, "raftq ") || !strings.Contains(r.stdout, "(commit ") {
		t.Fatalf("raftq --version: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}
