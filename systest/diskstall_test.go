package systest

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/internal/testcluster"
)

// ackLog records when each send was acknowledged.
type ackLog struct {
	mu   sync.Mutex
	at   []time.Time
	keys map[string]bool
	errs map[string]int // failed attempts by error text
}

func newAckLog() *ackLog { return &ackLog{keys: map[string]bool{}, errs: map[string]int{}} }

func (a *ackLog) ack(key string) {
	a.mu.Lock()
	a.at = append(a.at, time.Now())
	a.keys[key] = true
	a.mu.Unlock()
}

func (a *ackLog) fail(err error) {
	a.mu.Lock()
	a.errs[err.Error()]++
	a.mu.Unlock()
}

func (a *ackLog) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.at)
}

// longestGap is the longest time in [from, to] without an acknowledgement,
// and where it started.
func (a *ackLog) longestGap(from, to time.Time) (gap time.Duration, at time.Time) {
	a.mu.Lock()
	times := slices.Clone(a.at)
	a.mu.Unlock()
	slices.SortFunc(times, func(x, y time.Time) int { return x.Compare(y) })
	prev := from
	for _, ts := range append(times, to) {
		if ts.Before(from) {
			continue
		}
		if ts.After(to) {
			ts = to
		}
		if d := ts.Sub(prev); d > gap {
			gap, at = d, prev
		}
		prev = ts
		if !ts.Before(to) {
			break
		}
	}
	return gap, at
}

// sendLoad runs senders that each send messages one at a time with their
// own dedup keys (body = key), retrying a key until it is acknowledged,
// until stop is closed. Each call is bounded by callTimeout.
func sendLoad(t *testing.T, cl *client.Client, queue string, senders int, callTimeout time.Duration, acks *ackLog, stop <-chan struct{}) *sync.WaitGroup {
	t.Helper()
	var wg sync.WaitGroup
	for s := range senders {
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
					ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
					_, err := cl.Send(ctx, queue, []byte(key), client.DedupKey(key))
					cancel()
					if err == nil {
						acks.ack(key)
						break
					}
					acks.fail(err)
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	return &wg
}

// A shard leader whose filesystem freezes (every write blocks) for 20 s
// must not hold the shard for the whole stall: it notices within its
// stall timeout, holds back its raft traffic, and the others elect a
// leader that can write, so acknowledged sends never pause for 3 s or
// more from the start of the freeze; the frozen node logs why, resumes
// once thawed, and every acknowledged send is delivered.
func TestLeaderDiskStallFailsOver(t *testing.T) {
	requireDiskTools(t)
	var dirs []string
	for range 3 {
		dirs = append(dirs, loopFS(t, "", 512))
	}
	c := startCluster(t, testcluster.Options{Nodes: 3, Shards: 1, DataDirs: dirs, Args: []string{"--disk-reserve", "16MiB"}})
	mustCreateQueue(t, c, "q", &raftqv1.QueuePolicy{VisibilityTimeoutMs: 60_000})
	cl, err := client.Dial(ctxT(t, 30*time.Second), c.Addrs())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	acks := newAckLog()
	stop := make(chan struct{})
	wg := sendLoad(t, cl, "q", 8, 30*time.Second, acks, stop)
	stopped := false
	stopLoad := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer stopLoad()
	deadline := time.Now().Add(30 * time.Second)
	for acks.count() < 200 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d sends acknowledged before the fault", acks.count())
		}
		time.Sleep(50 * time.Millisecond)
	}

	victim := shardLeader(t, c, 0, 0)
	const stall = 20 * time.Second
	before := acks.count()
	start := time.Now()
	thaw := freeze(t, dirs[victim], stall+30*time.Second)
	t.Logf("froze %s (shard 0 leader) at %d acks", c.Nodes[victim].ID, before)
	time.Sleep(time.Until(start.Add(stall)))
	during := acks.count() - before
	thaw()
	end := time.Now()
	time.Sleep(3 * time.Second) // the thawed node rejoins under load
	stopLoad()

	gap, at := acks.longestGap(start, end)
	t.Logf("%d sends acknowledged during the %v freeze; longest gap %v, from %v after the freeze", during, stall,
		gap.Round(time.Millisecond), at.Sub(start).Round(time.Millisecond))
	acks.mu.Lock()
	t.Logf("failed attempts: %v", acks.errs)
	acks.mu.Unlock()
	if gap >= 3*time.Second {
		t.Errorf("acknowledged sends paused for %v (from %v after the freeze began); want under 3 s",
			gap.Round(time.Millisecond), at.Sub(start).Round(time.Millisecond))
	}
	if !c.Running(victim) {
		t.Fatalf("node %s exited after its disk stalled; a stall is not fatal", c.Nodes[victim].ID)
	}
	logs, err := os.ReadFile(c.Nodes[victim].LogPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"raft store write stalled", "raft store write completed after stalling"} {
		if !strings.Contains(string(logs), want) {
			t.Errorf("node %s never logged %q", c.Nodes[victim].ID, want)
		}
	}
	page := scrapePage(t, c, victim)
	for _, want := range []string{`raftq_raft_store_stalls_total{group="shard-0"} 1`, `raftq_raft_store_stalled{group="shard-0"} 0`} {
		if !strings.Contains(page, want) {
			t.Errorf("%s metrics lack %s", c.Nodes[victim].ID, want)
		}
	}
	acks.mu.Lock()
	keys := acks.keys
	acks.mu.Unlock()
	drainKeys(t, cl, "q", keys, 2*time.Minute)
}

// The meta leader's filesystem freezing must not hold the control plane:
// its first write stalls, it holds back its raft traffic, and the other
// two elect a meta leader, so a queue can be created through another node
// long before the disk comes back.
func TestMetaLeaderDiskStallFailsOver(t *testing.T) {
	requireDiskTools(t)
	var dirs []string
	for range 3 {
		dirs = append(dirs, loopFS(t, "", 512))
	}
	c := startCluster(t, testcluster.Options{Nodes: 3, Shards: 1, DataDirs: dirs, Args: []string{"--disk-reserve", "16MiB"}})
	mustCreateQueue(t, c, "before", nil)
	victim := -1
	for victim < 0 {
		st, err := raftqv1.NewClusterClient(c.Conn(0)).Status(ctxT(t, 10*time.Second), &raftqv1.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for i, n := range c.Nodes {
			if n.ID == st.GetMetaLeaderId() {
				victim = i
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	const stall = 15 * time.Second
	start := time.Now()
	thaw := freeze(t, dirs[victim], stall+30*time.Second)
	defer thaw()
	via := (victim + 1) % 3
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := queues(c, via).CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "during"})
		cancel()
		if err == nil {
			break
		}
		if time.Since(start) > stall-time.Second {
			t.Fatalf("no queue could be created while the meta leader %s's disk was frozen (last: %v)", c.Nodes[victim].ID, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("created a queue through %s %v after the meta leader %s froze", c.Nodes[via].ID,
		time.Since(start).Round(time.Millisecond), c.Nodes[victim].ID)
	thaw()
	if !c.Running(victim) {
		t.Fatalf("node %s exited after its disk stalled", c.Nodes[victim].ID)
	}
	if page := scrapePage(t, c, victim); !strings.Contains(page, `raftq_raft_store_stalls_total{group="meta"} 1`) {
		t.Errorf("%s metrics do not count the meta stall", c.Nodes[victim].ID)
	}
}
