package testcluster

import (
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// Test ports come from below Linux's ephemeral range (32768-60999 by
// default): a port the kernel hands out for outgoing connections can be
// taken as another socket's source port while a node is down, and the
// node's restart then fails with "address already in use".
const (
	portLow  = 20000
	portHigh = 32000
)

// freePorts picks n ports free for TCP and UDP (gossip uses both) on
// loopback, and reserves them until the test ends.
//
// Being free when picked is not enough: a node that is down (killed, or
// stopped to be restarted) leaves its ports free, and another cluster,
// in this test binary or in another package's that go test runs at the
// same time, could pick them and answer in its place. A test once read a
// restarted node's metrics from another cluster's node that had taken
// its HTTP port. So each port is also reserved with an flock on a file
// named for it, held until the test's cleanup; the kernel drops the lock
// when a test process dies, so a crashed run leaves nothing reserved.
func freePorts(t testing.TB, n int) []string {
	t.Helper()
	dir := portDir()
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatalf("port reservations: %v", err)
	}
	var probes, locks []io.Closer
	defer func() {
		for _, c := range probes {
			_ = c.Close()
		}
	}()
	t.Cleanup(func() {
		for _, c := range locks {
			_ = c.Close()
		}
	})
	var out []string
	for tries := 0; len(out) < n; tries++ {
		if tries > 100*n {
			t.Fatalf("no %d free ports in %d-%d", n, portLow, portHigh)
		}
		port := strconv.Itoa(portLow + rand.IntN(portHigh-portLow))
		lock, ok := reservePort(dir, port)
		if !ok {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+port)
		if err != nil {
			_ = lock.Close()
			continue
		}
		u, err := net.ListenPacket("udp", "127.0.0.1:"+port)
		if err != nil {
			_ = l.Close()
			_ = lock.Close()
			continue
		}
		probes = append(probes, l, u)
		locks = append(locks, lock)
		out = append(out, port)
	}
	return out
}

// portDir holds one lock file per reserved port, shared by every test
// process on the machine.
func portDir() string { return filepath.Join(os.TempDir(), "raftq-test-ports") }

// reservePort takes the exclusive lock on dir/port without waiting. Each
// call opens the file anew, so a second reservation of one port fails
// within one process as well as across processes.
func reservePort(dir, port string) (io.Closer, bool) {
	f, err := os.OpenFile(filepath.Join(dir, port), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return nil, false
	}
	return f, true
}
