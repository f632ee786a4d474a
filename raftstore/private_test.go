package raftstore

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestPrivateTakesGroupAndOtherAccessOff(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "shard-0", "snapshots")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	body := filepath.Join(sub, "state.bin")
	if err := os.WriteFile(body, []byte("message bodies"), 0o644); err != nil {
		t.Fatal(err)
	}
	owned := filepath.Join(dir, "node.json")
	if err := os.WriteFile(owned, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	// chmod past the test process's umask: the modes above may have been
	// narrowed already.
	for _, p := range []string{dir, filepath.Join(dir, "shard-0"), sub} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(body, 0o644); err != nil {
		t.Fatal(err)
	}
	changed, err := Private(dir)
	if err != nil {
		t.Fatal(err)
	}
	if changed != 4 { // dir, shard-0, snapshots, state.bin; node.json was private
		t.Fatalf("changed %d entries, want 4", changed)
	}
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s is %v after Private", path, info.Mode().Perm())
		}
		if info.Mode().Perm()&0o600 != 0o600 {
			t.Errorf("%s lost its owner's access: %v", path, info.Mode().Perm())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if changed, err := Private(dir); err != nil || changed != 0 {
		t.Fatalf("second Private: changed %d, err %v; want 0, nil", changed, err)
	}
}
