package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Backup refusals come before anything is dialled or written.
func TestBackupUsageErrors(t *testing.T) {
	const nowhere = "127.0.0.1:1"
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"backup", "create"}, "--out DIR is required"},
		{[]string{"backup", "create", "--out", full}, full + " is not empty: a backup goes into a new or empty directory"},
		{[]string{"backup", "create", "--out", filepath.Join(full, "b"), "--within", "0s"}, "--within 0s is not positive"},
		{[]string{"backup", "verify"}, "want 1 argument(s) DIR, got 0"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			r := raftq(t, nowhere, "", c.args...)
			if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
				t.Fatalf("exit %d, stderr %q; want %d mentioning %q", r.code, r.stderr, exitUsage, c.want)
			}
		})
	}
}

// verify needs no cluster, and names what is wrong.
func TestBackupVerifyOffline(t *testing.T) {
	dir := t.TempDir()
	r := raftq(t, "127.0.0.1:1", "", "backup", "verify", dir)
	if r.code != exitServer || !strings.Contains(r.stderr, "is not a backup: no manifest.json") {
		t.Fatalf("verify of an empty dir: exit %d, stderr %q", r.code, r.stderr)
	}
}
