package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/raftq/raftq/tlsconf"
)

func TestCertsCommands(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	out := mustRun(t, "", "certs", "dev", "--dir", dir, "--nodes", "n1,n2", "--host", "10.0.0.9")
	if !strings.Contains(out, "wrote ca.crt, ca.key and gossip.key") || !strings.Contains(out, "node/n2") {
		t.Fatalf("certs dev: %q", out)
	}
	n1, err := os.ReadFile(filepath.Join(dir, "n1.crt"))
	if err != nil {
		t.Fatal(err)
	}
	// Again: nothing is replaced.
	if out := mustRun(t, "", "certs", "dev", "--dir", dir, "--nodes", "n1,n2"); out != "" {
		t.Fatalf("second certs dev wrote %q", out)
	}
	if again, _ := os.ReadFile(filepath.Join(dir, "n1.crt")); string(again) != string(n1) {
		t.Fatal("second certs dev replaced n1's certificate")
	}
	st, err := tlsconf.Load(tlsconf.Files{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, "n1.crt"), Key: filepath.Join(dir, "n1.key")})
	if err != nil {
		t.Fatal(err)
	}
	if id := st.Identity(); id.Role != tlsconf.RoleNode || id.Name != "n1" {
		t.Fatalf("n1's certificate names %v", id)
	}
	for _, f := range []string{"ca.key", "n1.key", "gossip.key"} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v, mode %v; want 0600", f, err, fi.Mode().Perm())
		}
	}
	mustRun(t, "", "certs", "client", "billing", "--dir", dir)
	if _, err := os.Stat(filepath.Join(dir, "client-billing.crt")); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"certs", "init", "--dir", dir}, "already holds a CA"},
		{[]string{"certs", "node", "x", "--dir", filepath.Join(dir, "none")}, "no CA in"},
		{[]string{"certs", "node", "a/b", "--dir", dir}, "without spaces or slashes"},
		{[]string{"certs", "node", "ca", "--dir", dir}, "would overwrite the CA"},
		{[]string{"--cert", "c.crt", "queue", "list"}, "need --ca"},
	} {
		r := raftq(t, "127.0.0.1:1", "", tc.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("raftq %v: exit %d, stderr %q; want usage error with %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}
