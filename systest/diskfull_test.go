package systest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/internal/testcluster"
)

// A disk that fills up under load: with a reserve the leader refuses new
// sends up front (RESOURCE_EXHAUSTED, naming the disk) while receives and
// acks go on; without one the raft log itself runs out of space, the
// leader steps down and sends fail UNAVAILABLE until space is freed. In
// both no call outlives its deadline, no node exits or restarts, every
// acknowledged send is delivered, and sends succeed again once the
// ballast is deleted.
func TestDiskFullRefusesSendsAndRecovers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reserve string
		want    error // what refused sends fail with
	}{
		{"reserve", "12MiB", client.ErrExhausted},
		{"no-reserve", "0", client.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) { diskFullCase(t, tc.reserve, tc.want) })
	}
}

func diskFullCase(t *testing.T, reserve string, want error) {
	requireDiskTools(t)
	var dirs []string
	for range 3 {
		dirs = append(dirs, loopFS(t, "", 128))
	}
	c := startCluster(t, testcluster.Options{Nodes: 3, Shards: 1, DataDirs: dirs,
		Args: []string{"--disk-reserve", reserve, "--wal-segment-size", "4MiB"}})
	mustCreateQueue(t, c, "q", &raftqv1.QueuePolicy{VisibilityTimeoutMs: 60_000})
	cl, err := client.Dial(ctxT(t, 30*time.Second), c.Addrs())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	pids := make([]int, len(c.Nodes))
	for i := range c.Nodes {
		pids[i] = c.PID(i)
	}
	var ballasts []string
	for _, d := range dirs {
		ballasts = append(ballasts, ballast(t, d, 20<<20))
	}

	const deadline = 5 * time.Second
	var (
		mu        sync.Mutex
		acked     = map[string]bool{}
		lastAck   time.Time
		refusals  int
		slowest   time.Duration
		wrongErrs []error
		stop      = make(chan struct{})
		wg        sync.WaitGroup
	)
	body := strings.Repeat("x", 8<<10)
	for s := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				key := fmt.Sprintf("s%d-%d", s, i)
				for {
					select {
					case <-stop:
						return
					default:
					}
					ctx, cancel := context.WithTimeout(context.Background(), deadline)
					start := time.Now()
					_, err := cl.Send(ctx, "q", []byte(key+" "+body), client.DedupKey(key))
					took := time.Since(start)
					cancel()
					mu.Lock()
					slowest = max(slowest, took)
					switch {
					case err == nil:
						acked[key], lastAck = true, time.Now()
					case errors.Is(err, want) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, client.ErrUnavailable):
						refusals++
					default:
						wrongErrs = append(wrongErrs, err)
					}
					mu.Unlock()
					if err == nil {
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopLoad()

	// Full: sends are refused and none has been acknowledged for a while.
	waitUntil(t, 2*time.Minute, "the disks to fill and sends to be refused", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return refusals > 20 && time.Since(lastAck) > 3*time.Second
	})
	mu.Lock()
	t.Logf("full after %d acknowledged sends; %d refusals so far", len(acked), refusals)
	mu.Unlock()

	if errors.Is(want, client.ErrExhausted) {
		// The refusal names the disk, and consumers keep working.
		ctx := ctxT(t, 30*time.Second)
		_, err := cl.Send(ctx, "q", []byte("probe"), client.DedupKey("probe"))
		if !errors.Is(err, client.ErrExhausted) || !strings.Contains(err.Error(), "disk almost full") {
			t.Fatalf("send to a full disk: %v, want RESOURCE_EXHAUSTED saying the disk is almost full", err)
		}
		msgs, err := cl.Receive(ctx, "q", client.ReceiveOptions{Max: 10, Wait: 5 * time.Second})
		if err != nil || len(msgs) == 0 {
			t.Fatalf("receive while sends are refused: %d messages, %v", len(msgs), err)
		}
		var receipts []string
		for _, m := range msgs {
			receipts = append(receipts, m.Receipt)
		}
		if err := cl.AckBatch(ctx, receipts); err != nil {
			t.Fatalf("ack while sends are refused: %v", err)
		}
		mu.Lock()
		for _, m := range msgs {
			delete(acked, strings.Fields(string(m.Body))[0]) // delivered
		}
		mu.Unlock()
		if !anyMetric(t, c, `raftq_disk_refusing_sends{dir=`, "} 1") {
			t.Error("no node reports raftq_disk_refusing_sends 1")
		}
	} else if !anyMetric(t, c, `raftq_raft_store_full_total{group="shard-0"}`, "") || !anyLog(c, "raft store write refused: no space left") {
		t.Error("no node reports its shard's raft store running out of space")
	}

	for _, b := range ballasts {
		if err := os.Remove(b); err != nil {
			t.Fatal(err)
		}
	}
	freed := time.Now()
	waitUntil(t, 2*time.Minute, "sends to be acknowledged again", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return lastAck.After(freed)
	})
	t.Logf("sends acknowledged again %v after the ballast was deleted", time.Since(freed).Round(time.Millisecond))
	stopLoad()

	mu.Lock()
	defer mu.Unlock()
	if slowest > deadline+2*time.Second {
		t.Errorf("a send took %v, past its %v deadline", slowest, deadline)
	}
	for _, err := range wrongErrs[:min(len(wrongErrs), 5)] {
		t.Errorf("send failed with %v; want %v, UNAVAILABLE or the deadline", err, want)
	}
	for i := range c.Nodes {
		if !c.Running(i) || c.PID(i) != pids[i] {
			t.Fatalf("node %s exited or restarted; a full disk must not stop it", c.Nodes[i].ID)
		}
	}
	drainKeys(t, cl, "q", acked, 2*time.Minute)
}

// drainKeys receives and acks from queue until every key in want was
// delivered (a body is the key, then optionally a space and more), and
// fails the test if any is missing by the deadline.
func drainKeys(t *testing.T, cl *client.Client, queue string, want map[string]bool, d time.Duration) {
	t.Helper()
	ctx := ctxT(t, d)
	left := len(want)
	seen := map[string]bool{}
	for left > 0 {
		msgs, err := cl.Receive(ctx, queue, client.ReceiveOptions{Max: 100, Wait: time.Second})
		if ctx.Err() != nil {
			t.Fatalf("%d of %d acknowledged sends were never delivered (last receive error: %v)", left, len(want), err)
		}
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		var receipts []string
		for _, m := range msgs {
			key := strings.Fields(string(m.Body))[0]
			if want[key] && !seen[key] {
				seen[key] = true
				left--
			}
			receipts = append(receipts, m.Receipt)
		}
		if len(receipts) > 0 {
			if err := cl.AckBatch(ctx, receipts); err != nil {
				t.Logf("ack while draining: %v", err)
			}
		}
	}
}

// anyMetric reports whether some node's metrics have a line starting with
// prefix and ending with suffix ("" matches any value but 0).
func anyMetric(t *testing.T, c *testcluster.Cluster, prefix, suffix string) bool {
	t.Helper()
	for i := range c.Nodes {
		for _, line := range strings.Split(scrapePage(t, c, i), "\n") {
			if !strings.HasPrefix(line, prefix) {
				continue
			}
			if suffix == "" && !strings.HasSuffix(line, " 0") || suffix != "" && strings.HasSuffix(line, suffix) {
				return true
			}
		}
	}
	return false
}

// anyLog reports whether some node logged text.
func anyLog(c *testcluster.Cluster, text string) bool {
	for _, n := range c.Nodes {
		if b, err := os.ReadFile(n.LogPath); err == nil && strings.Contains(string(b), text) {
			return true
		}
	}
	return false
}

func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
