package systest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/internal/testenv"
)

// upgradeFrom is the commit the rolling upgrade test starts the cluster
// on: the last commit at log format 1 (the one before replica moves and
// drains became format-2 kinds), so the upgrade crosses a log format. Move
// it forward when a release raises the format again, to the last commit
// before the raise. RAFTQ_UPGRADE_FROM overrides it (any commit the
// checkout has or can fetch).
const upgradeFrom = "f03be84"

// previousNodeBin builds raftq-node as of upgradeFrom into the test's
// temporary directory: the tree comes out of git history (`git archive`),
// the build uses the module cache (and the Go proxy for anything missing).
// A checkout without that history (a shallow CI clone) fetches it first.
// Without git or the history the test skips, or fails under
// RAFTQ_STRICT_FAULTS=1. It returns the binary and the commit it is of.
func previousNodeBin(t *testing.T) (bin, commit string) {
	t.Helper()
	commit = upgradeFrom
	if c := os.Getenv("RAFTQ_UPGRADE_FROM"); c != "" {
		commit = c
	}
	testenv.RequireTools(t, "git", "go", "tar")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	git := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = root
		return cmd.CombinedOutput()
	}
	if _, err := git("rev-parse", "--git-dir"); err != nil {
		testenv.SkipOrFail(t, "not a git checkout: the upgrade test builds its old binary from git history")
	}
	have := func() bool { _, err := git("rev-parse", "--verify", "-q", commit+"^{commit}"); return err == nil }
	if !have() {
		if out, _ := git("rev-parse", "--is-shallow-repository"); strings.TrimSpace(string(out)) == "true" {
			// A depth-1 CI checkout: ask its remote for the history.
			if out, err := git("fetch", "--quiet", "--unshallow"); err != nil {
				t.Logf("git fetch --unshallow: %v\n%s", err, out)
			}
		}
	}
	if !have() {
		testenv.SkipOrFail(t, fmt.Sprintf("commit %s is not in this checkout (git fetch --unshallow fetches it)", commit))
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	tarball := filepath.Join(dir, "src.tar")
	if out, err := git("archive", "--format=tar", "-o", tarball, commit); err != nil {
		t.Fatalf("git archive %s: %v\n%s", commit, err, out)
	}
	if out, err := exec.CommandContext(ctx, "tar", "-xf", tarball, "-C", src).CombinedOutput(); err != nil {
		t.Fatalf("untar %s: %v\n%s", commit, err, out)
	}
	bin = filepath.Join(dir, "raftq-node-"+commit)
	began := time.Now()
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/node")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build of raftq-node at %s: %v\n%s", commit, err, out)
	}
	t.Logf("built raftq-node at %s in %v", commit, time.Since(began).Round(time.Millisecond))
	return bin, commit
}
