package systest

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/raftq/raftq/internal/testcluster"
	"github.com/raftq/raftq/internal/testenv"
)

// requireDiskTools skips (fails under RAFTQ_STRICT_FAULTS=1) unless loop
// filesystems can be made here.
func requireDiskTools(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireTools(t, "truncate", "losetup", "mkfs.ext4", "mount", "umount", "fsfreeze")
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// loopFS makes an ext4 filesystem of sizeMiB on a loop device backed by a
// file in imgDir (the test's temp dir when empty), mounts it and returns
// the mount point. It is unmounted and its loop device detached when the
// test ends, after the cluster's processes are gone (register it before
// starting the cluster).
func loopFS(t *testing.T, imgDir string, sizeMiB int) string {
	t.Helper()
	if imgDir == "" {
		imgDir = t.TempDir()
	}
	img, err := os.CreateTemp(imgDir, "fs-*.img")
	if err != nil {
		t.Fatal(err)
	}
	_ = img.Close()
	run(t, "truncate", "-s", fmt.Sprintf("%dM", sizeMiB), img.Name())
	dev := run(t, "losetup", "-f", "--show", img.Name())
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v: %s", dev, err, out)
		}
		// The kernel detaches a loop device in the background; until it
		// has, the image file is open and its filesystem busy.
		for range 200 {
			out, err := exec.Command("losetup", "-j", img.Name()).CombinedOutput()
			if err == nil && len(strings.TrimSpace(string(out))) == 0 {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("loop device %s still attached to %s after 20 s", dev, img.Name())
	})
	run(t, "mkfs.ext4", "-q", "-F", dev)
	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "mount", dev, mnt)
	t.Cleanup(func() { unmount(t, mnt) })
	return mnt
}

// tmpfs mounts a tmpfs of sizeMiB and returns its mount point; it is
// unmounted when the test ends.
func tmpfs(t *testing.T, sizeMiB int) string {
	t.Helper()
	mnt := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%dm", sizeMiB), "tmpfs", mnt)
	t.Cleanup(func() { unmount(t, mnt) })
	return mnt
}

// unmount unmounts mnt, thawing it first and retrying while it is busy
// (processes that just died may still hold files for a moment).
func unmount(t *testing.T, mnt string) {
	_ = exec.Command("fsfreeze", "-u", mnt).Run()
	var out []byte
	var err error
	for range 200 {
		if out, err = exec.Command("umount", mnt).CombinedOutput(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Still busy after 20 s (a loop device the kernel has not finished
	// detaching): detach it lazily so nothing stays mounted, and say so.
	if lout, lerr := exec.Command("umount", "-l", mnt).CombinedOutput(); lerr != nil {
		t.Errorf("umount %s: %v: %s; lazy: %v: %s", mnt, err, out, lerr, lout)
		return
	}
	t.Logf("umount %s was busy for 20 s (%s); unmounted lazily", mnt, strings.TrimSpace(string(out)))
}

// freeze freezes the filesystem at mnt (fsfreeze -f: every write to it
// blocks) and returns the thaw. A process blocked on a frozen filesystem
// cannot even be killed, so the filesystem is thawed when the test ends
// (register freeze after starting the cluster: cleanups run last-first,
// so this runs before the processes are killed), and a detached process
// thaws it after safety even if this test binary dies first.
func freeze(t *testing.T, mnt string, safety time.Duration) (thaw func()) {
	t.Helper()
	guard := exec.Command("sh", "-c", fmt.Sprintf("sleep %d; exec fsfreeze -u %s", int(safety.Seconds())+1, mnt))
	guard.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := guard.Start(); err != nil {
		t.Fatalf("start the thaw guard: %v", err)
	}
	thawed := false
	thaw = func() {
		if thawed {
			return
		}
		thawed = true
		if out, err := exec.Command("fsfreeze", "-u", mnt).CombinedOutput(); err != nil && !strings.Contains(string(out), "Invalid argument") {
			t.Errorf("fsfreeze -u %s: %v: %s", mnt, err, out)
		}
		// The guard's shell and its sleep: a group of its own (Setsid).
		_ = syscall.Kill(-guard.Process.Pid, syscall.SIGKILL)
		_ = guard.Wait()
	}
	t.Cleanup(thaw)
	run(t, "fsfreeze", "-f", mnt)
	return thaw
}

// ballast fills the filesystem at dir with a file until about leave bytes
// are free, and returns its path.
func ballast(t *testing.T, dir string, leave uint64) string {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	free := st.Bavail * uint64(st.Bsize)
	if free <= leave {
		t.Fatalf("%s has only %d bytes free, want more than %d", dir, free, leave)
	}
	path := filepath.Join(dir, "ballast")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Written, not fallocated: ext4 then counts every block at once.
	buf := make([]byte, 1<<20)
	for left := int64(free - leave); left > 0; left -= int64(len(buf)) {
		n := min(int64(len(buf)), left)
		if _, err := f.Write(buf[:n]); err != nil && !errors.Is(err, syscall.ENOSPC) {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	return path
}

// scrape returns node i's /metrics page.
func scrapePage(t *testing.T, c *testcluster.Cluster, i int) string {
	t.Helper()
	resp, err := http.Get("http://" + c.Nodes[i].HTTP + "/metrics")
	if err != nil {
		t.Fatalf("scrape %s: %v", c.Nodes[i].ID, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("scrape %s: %v", c.Nodes[i].ID, err)
	}
	return string(b)
}
