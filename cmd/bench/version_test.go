package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestVersionFlag(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"--version"}, &out, &errOut); err != nil {
		t.Fatalf("raftq-bench --version: %v (stderr %q)", err, errOut.String())
	}
	if !strings.HasPrefix(out.String(), "raftq-bench ") || !strings.Contains(out.String(), "(commit ") {
		t.Fatalf("raftq-bench --version printed %q", out.String())
	}
}
