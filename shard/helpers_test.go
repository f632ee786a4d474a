package shard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/raftmux"
)

func testLogger() *slog.Logger {
	if os.Getenv("SHARD_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// fastTuning keeps elections short for tests while leaving room for the
// race detector on a busy two-core machine (200 ms flapped at load 10).
func fastTuning() raftgroup.RaftTuning {
	return raftgroup.RaftTuning{
		HeartbeatTimeout:   400 * time.Millisecond,
		ElectionTimeout:    400 * time.Millisecond,
		LeaderLeaseTimeout: 200 * time.Millisecond,
		CommitTimeout:      5 * time.Millisecond,
	}
}

// node is one replica slot of a test cluster; it can be stopped and
// reopened on the same directory.
type node struct {
	id   string
	addr raft.ServerAddress
	dir  string
	sh   *Shard
	mux  *raftmux.Mux         // tcp clusters
	mem  *raft.InmemTransport // inmem clusters
	skew atomic.Int64         // added to this replica's clock, in ms
	gate *raftmux.Gate        // the gate of its current transport
	disk *storeFault          // faults injected under its raft stores (withDiskFaults)
}

type cluster struct {
	t       testing.TB
	shardID uint32
	nodes   []*node
	tuning  raftgroup.RaftTuning
	grace   time.Duration
	inmem   bool
	mu      sync.Mutex
	// disk, if set, gives each replica these disk options and a
	// storeFault under its stores (withDiskFaults).
	disk *raftgroup.DiskOptions
	// nodeFormat and kindFormat, if set, are every replica's
	// Config.NodeFormat and Config.kindFormat.
	nodeFormat func(string) uint32
	kindFormat func(*fsmpb.Command) uint32
	// seed, if set, is every bootstrapping replica's Config.Seed.
	seed *raftgroup.Seed
}

func newCluster(t testing.TB, n int, inmem bool, tuning raftgroup.RaftTuning, opts ...func(*cluster)) *cluster {
	t.Helper()
	c := &cluster{t: t, shardID: 1, tuning: tuning, inmem: inmem, grace: 300 * time.Millisecond}
	for _, o := range opts {
		o(c)
	}
	root := t.TempDir()
	for i := range n {
		nd := &node{id: fmt.Sprintf("n%d", i+1), dir: filepath.Join(root, fmt.Sprintf("n%d", i+1))}
		if inmem {
			nd.addr = raft.ServerAddress(nd.id)
		} else {
			m, err := raftmux.Listen("127.0.0.1:0", "", testLogger())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = m.Close() })
			nd.mux, nd.addr = m, raft.ServerAddress(m.Addr())
		}
		c.nodes = append(c.nodes, nd)
	}
	var servers []raft.Server
	for _, nd := range c.nodes {
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(nd.id), Address: nd.addr})
	}
	for _, nd := range c.nodes {
		c.start(nd, servers)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, nd := range c.nodes {
			if nd.sh != nil {
				_ = nd.sh.Raft().Shutdown().Error() // no transfer: fast teardown
				_ = nd.sh.Shutdown(ctx)
			}
		}
	})
	return c
}

func (c *cluster) transport(nd *node) raft.Transport {
	c.t.Helper()
	nd.gate = &raftmux.Gate{}
	if !c.inmem {
		tr, err := nd.mux.Transport(GroupName(c.shardID), raftmux.TransportOptions{Timeout: 2 * time.Second, Gate: nd.gate})
		if err != nil {
			c.t.Fatal(err)
		}
		return tr
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, tr := raft.NewInmemTransport(nd.addr)
	nd.mem = tr
	for _, o := range c.nodes {
		if o != nd && o.mem != nil {
			tr.Connect(o.addr, o.mem)
			o.mem.Connect(nd.addr, tr)
		}
	}
	return raftmux.GatedTransport(tr, nd.gate)
}

func (c *cluster) start(nd *node, bootstrap []raft.Server) {
	c.t.Helper()
	sh, err := Open(Config{
		ID:         c.shardID,
		NodeID:     nd.id,
		Dir:        nd.dir,
		Transport:  c.transport(nd),
		Bootstrap:  bootstrap,
		Now:        func() time.Time { return time.Now().Add(time.Duration(nd.skew.Load()) * time.Millisecond) },
		Logger:     testLogger().With("node", nd.id),
		Raft:       c.tuning,
		LeaseGrace: c.grace,
		Gate:       nd.gate,
		Disk:       c.diskOptions(),
		diskTest:   c.diskHooks(nd),

		NodeFormat: c.nodeFormat,
		kindFormat: c.kindFormat,
		Seed:       c.seed,
	})
	if err != nil {
		c.t.Fatalf("open %s: %v", nd.id, err)
	}
	c.mu.Lock()
	nd.sh = sh
	c.mu.Unlock()
}

// kill stops a replica abruptly: no leadership transfer.
func (c *cluster) kill(nd *node) {
	c.t.Helper()
	c.mu.Lock()
	sh := nd.sh
	nd.sh = nil
	c.mu.Unlock()
	if err := sh.Raft().Shutdown().Error(); err != nil {
		c.t.Fatalf("kill %s: %v", nd.id, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sh.Shutdown(ctx); err != nil {
		c.t.Fatalf("close %s after kill: %v", nd.id, err)
	}
}

func (c *cluster) restart(nd *node) { c.start(nd, nil) }

// partition cuts nd off from every other replica (inmem only).
func (c *cluster) partition(nd *node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, o := range c.nodes {
		if o != nd {
			nd.mem.Disconnect(o.addr)
			o.mem.Disconnect(nd.addr)
		}
	}
}

func (c *cluster) heal(nd *node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, o := range c.nodes {
		if o != nd {
			nd.mem.Connect(o.addr, o.mem)
			o.mem.Connect(nd.addr, nd.mem)
		}
	}
}

func (c *cluster) live() []*node {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*node
	for _, nd := range c.nodes {
		if nd.sh != nil {
			out = append(out, nd)
		}
	}
	return out
}

// leader waits for a ready leader among the live replicas.
func (c *cluster) leader() *node {
	c.t.Helper()
	return c.leaderWithin(15 * time.Second)
}

// leaderWithin is leader with its own bound, for groups with long
// election timeouts.
func (c *cluster) leaderWithin(d time.Duration) *node {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		for _, nd := range c.live() {
			if nd.sh.IsLeader() {
				return nd
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatalf("no ready leader within %v", d)
	return nil
}

func (c *cluster) followers(leader *node) []*node {
	var out []*node
	for _, nd := range c.live() {
		if nd != leader {
			out = append(out, nd)
		}
	}
	return out
}

// converge waits until every live replica applied the same index and then
// requires identical FSM digests.
func (c *cluster) converge() {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var first [32]byte
		var firstIdx uint64
		same := true
		for i, nd := range c.live() {
			d, idx, err := nd.sh.FSM().Digest()
			if err != nil {
				c.t.Fatalf("digest %s: %v", nd.id, err)
			}
			if i == 0 {
				first, firstIdx = d, idx
				continue
			}
			if idx != firstIdx || d != first {
				same = false
				if idx == firstIdx && d != first {
					c.t.Fatalf("replicas diverged at applied index %d: %s digest %x != %x", idx, nd.id, d, first)
				}
			}
		}
		if same && firstIdx > 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, nd := range c.live() {
				c.t.Logf("%s: %+v", nd.id, nd.sh.Info())
			}
			c.t.Fatal("replicas did not converge within 20 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func upsertCmd(queue string, p *fsmpb.QueuePolicy) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_UpsertQueue{UpsertQueue: &fsmpb.UpsertQueue{Queue: queue, Policy: p}}}
}

func enqueueCmd(queue string, msgs ...*fsmpb.NewMessage) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_Enqueue{Enqueue: &fsmpb.Enqueue{Queue: queue, Messages: msgs}}}
}

func ackCmd(rs ...*fsmpb.Receipt) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_Ack{Ack: &fsmpb.Ack{Receipts: rs}}}
}

func receiptOf(m *fsmpb.Message) *fsmpb.Receipt {
	return &fsmpb.Receipt{MessageId: m.GetId(), LeaseEpoch: m.GetLeaseEpoch()}
}

func mustPropose(t testing.TB, s *Shard, cmd *fsmpb.Command) *fsmpb.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := s.Propose(ctx, cmd)
	if err != nil {
		t.Fatalf("propose: %v", err)
	}
	if c := res.GetStatus().GetCode(); c != fsmpb.Code_CODE_OK {
		t.Fatalf("propose: status %v %s", c, res.GetStatus().GetMessage())
	}
	return res
}

func mustQueue(t testing.TB, s *Shard, queue string, p *fsmpb.QueuePolicy) {
	t.Helper()
	mustPropose(t, s, upsertCmd(queue, p))
}

// mustEnqueue enqueues one message and returns its id.
func mustEnqueue(t testing.TB, s *Shard, queue string, m *fsmpb.NewMessage) uint64 {
	t.Helper()
	res := mustPropose(t, s, enqueueCmd(queue, m))
	items := res.GetEnqueue().GetItems()
	if len(items) != 1 || items[0].GetStatus().GetCode() != fsmpb.Code_CODE_OK {
		t.Fatalf("enqueue: %v", res)
	}
	return items[0].GetMessageId()
}

func mustReceive(t testing.TB, s *Shard, queue string, max uint32, visibility time.Duration) []*fsmpb.Message {
	t.Helper()
	res := mustPropose(t, s, &fsmpb.Command{Cmd: &fsmpb.Command_Receive{Receive: &fsmpb.Receive{
		Queue: queue, Max: max, VisibilityTimeoutMs: visibility.Milliseconds(),
	}}})
	return res.GetReceive().GetMessages()
}

// proposeAnywhere retries cmd on whichever replica leads until ctx ends; it
// returns the result and whether the outcome is known.
func (c *cluster) proposeAnywhere(ctx context.Context, cmd *fsmpb.Command) (*fsmpb.Result, error) {
	for {
		var lastErr error
		for _, nd := range c.liveLocked() {
			sh := nd
			res, err := sh.Propose(ctx, cmd)
			if err == nil {
				return res, nil
			}
			lastErr = err
			if !errors.Is(err, raftgroup.ErrNotLeader) && !errors.Is(err, ErrShutdown) {
				return nil, err
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (last: %v)", ctx.Err(), lastErr)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// mustEnqueueAnywhere enqueues with a dedup key, retrying through leader
// changes and indeterminate results until it is acknowledged: exactly one
// message results however many attempts it takes.
func (c *cluster) mustEnqueueAnywhere(queue, key string, body []byte) uint64 {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		res, err := c.proposeAnywhere(ctx, enqueueCmd(queue, &fsmpb.NewMessage{Body: body, DedupKey: key}))
		if err == nil {
			return res.GetEnqueue().GetItems()[0].GetMessageId()
		}
		if !errors.Is(err, raftgroup.ErrUnknownResult) || ctx.Err() != nil {
			c.t.Fatalf("enqueue %s: %v", key, err)
		}
	}
}

// liveLocked snapshots the live shards under the cluster lock, so load
// goroutines can run while the test kills and restarts replicas.
func (c *cluster) liveLocked() []*Shard {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*Shard
	for _, nd := range c.nodes {
		if nd.sh != nil {
			out = append(out, nd.sh)
		}
	}
	return out
}
