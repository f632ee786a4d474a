package systest

import (
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/internal/testcluster"
)

// A node whose disk fails its writes stops: n1's data dir is an ext4
// filesystem on a loop device whose image lives on a small tmpfs, and
// filling that tmpfs makes the device fail writeback, so the raft log's
// fsync fails (the kernel reports ENOSPC for the lost writeback and logs
// "potential data loss"). The node must exit with a fatal line naming the
// directory instead of retrying the fsync; the other two go on serving,
// every acknowledged send is delivered, and once the device has room
// again n1 restarts and recovers from its log.
func TestDiskWriteErrorStopsNode(t *testing.T) {
	requireDiskTools(t)
	back := tmpfs(t, 64)
	dirs := []string{loopFS(t, back, 256), "", ""}
	c := startCluster(t, testcluster.Options{Nodes: 3, Shards: 1, DataDirs: dirs, Args: []string{"--disk-reserve", "0"}})
	mustCreateQueue(t, c, "q", &raftqv1.QueuePolicy{VisibilityTimeoutMs: 60_000})
	cl, err := client.Dial(ctxT(t, 30*time.Second), c.Addrs())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	acks := newAckLog()
	stop := make(chan struct{})
	wg := sendLoad(t, cl, "q", 8, 30*time.Second, acks, stop)
	stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopLoad()
	waitUntil(t, 30*time.Second, "first acks", func() bool { return acks.count() > 100 })

	fill := ballast(t, back, 0)
	t.Cleanup(func() { _ = os.Remove(fill) })
	exited, exitErr := c.WaitExit(0, 60*time.Second)
	if !exited {
		t.Fatal("n1 kept running although its disk fails writes")
	}
	gone := time.Now()
	if exitErr == nil {
		t.Fatal("n1 exited with status 0 after a disk failure")
	}
	logs, err := os.ReadFile(c.Nodes[0].LogPath)
	if err != nil {
		t.Fatal(err)
	}
	var fatal string
	for _, l := range strings.Split(string(logs), "\n") {
		if strings.Contains(l, "FATAL: raft store write failed") {
			fatal = l
		}
	}
	if fatal == "" || !strings.Contains(fatal, "dir="+dirs[0]) {
		t.Fatalf("n1 exited (%v) without a fatal line naming its directory %s; got %q", exitErr, dirs[0], fatal)
	}
	t.Logf("n1: %s", fatal)
	waitUntil(t, 30*time.Second, "sends acknowledged without n1", func() bool {
		acks.mu.Lock()
		defer acks.mu.Unlock()
		return len(acks.at) > 0 && acks.at[len(acks.at)-1].After(gone.Add(time.Second))
	})

	// Room again: n1 restarts on the same filesystem and recovers.
	if err := os.Remove(fill); err != nil {
		t.Fatal(err)
	}
	c.Restart(0)
	if err := c.WaitServing(ctxT(t, 60*time.Second), 0); err != nil {
		t.Fatalf("n1 did not serve again after the disk had room: %v", err)
	}
	stopLoad()
	acks.mu.Lock()
	keys := acks.keys
	acks.mu.Unlock()
	drainKeys(t, cl, "q", keys, 2*time.Minute)
}
