package testcluster

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// Main is a TestMain body for packages that start clusters: it builds the
// node binary into a temporary directory (storing its path in *bin), runs
// any extra build steps, runs the tests, cleans up and exits.
func Main(m *testing.M, bin *string, extra ...func(ctx context.Context, dir string) error) {
	dir, err := os.MkdirTemp("", "raftq-test-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	*bin, err = Build(ctx, dir)
	for _, step := range extra {
		if err != nil {
			break
		}
		err = step(ctx, dir)
	}
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}
