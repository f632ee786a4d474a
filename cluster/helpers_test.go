package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftq/raftq/peer"
	"github.com/raftq/raftq/peer/peerpb"
	"github.com/raftq/raftq/raftgroup"
)

// testLogger is quiet unless RAFTQ_TEST_LOG names a level (e.g. debug).
func testLogger() *slog.Logger {
	level := slog.LevelError + 4
	if v := os.Getenv("RAFTQ_TEST_LOG"); v != "" {
		_ = level.UnmarshalText([]byte(v))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// freeAddr reserves a loopback port by binding and releasing it, so a node
// restarted from its directory can come back on the same addresses.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

type testCluster struct {
	t *testing.T
	// live is what in-process peers (testPeers) reach; nodes is the test
	// goroutine's own view.
	liveMu sync.Mutex
	live   map[string]*Node
	name   string // gossip label: other tests' clusters cannot pull these nodes in
	cfgs   map[string]Config
	nodes  map[string]*Node
	// started names the nodes that ran at least once.
	started map[string]bool
	// changes records the group changes leaders applied for peers
	// (testPeers.GroupChange), as "group op node".
	changesMu sync.Mutex
	changes   []string
}

// liveNode is the running node id, or nil; safe beside the test goroutine.
func (tc *testCluster) liveNode(id string) *Node {
	tc.liveMu.Lock()
	defer tc.liveMu.Unlock()
	return tc.live[id]
}

// groupChanges lists the group changes applied so far.
func (tc *testCluster) groupChanges() []string {
	tc.changesMu.Lock()
	defer tc.changesMu.Unlock()
	return slices.Clone(tc.changes)
}

func newTestCluster(t *testing.T) *testCluster {
	tc := &testCluster{t: t, name: fmt.Sprintf("test-%d-%d", os.Getpid(), rand.Uint64()), cfgs: map[string]Config{}, nodes: map[string]*Node{}, started: map[string]bool{},
		live: map[string]*Node{}}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, n := range tc.nodes {
			_ = n.Shutdown(ctx)
		}
	})
	return tc
}

// define records a node's configuration; seeds are the gossip addresses of
// the nodes named in join (defined earlier).
func (tc *testCluster) define(id string, expect int, join ...string) Config {
	tc.t.Helper()
	var seeds []string
	for _, j := range join {
		seeds = append(seeds, tc.cfgs[j].GossipBind)
	}
	raftAddr, gossipAddr := freeAddr(tc.t), freeAddr(tc.t)
	cfg := Config{
		NodeID:          id,
		DataDir:         filepath.Join(tc.t.TempDir(), id),
		GRPCAddr:        "grpc-" + id + ":1",
		RaftBind:        raftAddr,
		RaftAdvertise:   raftAddr,
		GossipBind:      gossipAddr,
		GossipAdvertise: gossipAddr,
		Join:            seeds,
		ClusterName:     tc.name,
		BootstrapExpect: expect,
		Shards:          4,
		Replication:     3,
		Logger:          testLogger(),
		Peers:           testPeers{tc},
		Raft:            raftgroup.RaftTuning{SnapshotInterval: time.Hour},
		NonvoterGrace:   300 * time.Millisecond,
		DeleteGrace:     300 * time.Millisecond,
		// Short, so tests see shards settle on their preferred replicas.
		// The shutdown check in TestCluster_FormServeJoinRestart needs no
		// margin over it: the stopped node is those shards' preferred
		// replica, so no hand-off follows the transfer it checks for.
		PreferredLeaderDelay: time.Second,
		// These tests place replicas by hand (drains, repairs) and check
		// where they are; rebalancing has tests of its own that turn it on.
		DisableRebalance: true,
	}
	tc.cfgs[id] = cfg
	return cfg
}

func (tc *testCluster) start(id string) *Node {
	tc.t.Helper()
	n, err := Start(context.Background(), tc.cfgs[id])
	// freeAddr's ports are free only until something else binds them:
	// another test package or an outgoing connection can take one first.
	// A node that never ran has no address others depend on (seeds only
	// need one live peer), so it moves to new ports.
	for try := 0; err != nil && strings.Contains(err.Error(), "address already in use") && !tc.started[id] && try < 3; try++ {
		tc.t.Logf("start %s: %v; retrying on new ports", id, err)
		cfg := tc.cfgs[id]
		cfg.RaftBind, cfg.GossipBind = freeAddr(tc.t), freeAddr(tc.t)
		cfg.RaftAdvertise, cfg.GossipAdvertise = cfg.RaftBind, cfg.GossipBind
		tc.cfgs[id] = cfg
		n, err = Start(context.Background(), cfg)
	}
	if err != nil {
		tc.t.Fatalf("start %s: %v", id, err)
	}
	// Cleanups run last-registered first: this one, registered after the
	// node's data directory (define), stops the node before that directory
	// is removed, so nothing it writes at the end (a shard opened by a
	// late growth) lands in a directory recreated after the removal.
	tc.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = n.Shutdown(ctx)
	})
	tc.nodes[id] = n
	tc.started[id] = true
	tc.liveMu.Lock()
	tc.live[id] = n
	tc.liveMu.Unlock()
	return n
}

func (tc *testCluster) stop(id string) {
	tc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tc.liveMu.Lock()
	delete(tc.live, id)
	tc.liveMu.Unlock()
	if err := tc.nodes[id].Shutdown(ctx); err != nil {
		tc.t.Errorf("shutdown %s: %v", id, err)
	}
	delete(tc.nodes, id)
}

func (tc *testCluster) waitReady(timeout time.Duration) {
	tc.t.Helper()
	deadline := time.After(timeout)
	for id, n := range tc.nodes {
		select {
		case <-n.Ready():
		case <-deadline:
			tc.t.Fatalf("node %s not ready after %v", id, timeout)
		}
	}
}

func (tc *testCluster) metaLeader() (*Node, bool) {
	for _, n := range tc.nodes {
		if n.Meta().IsLeader() {
			return n, true
		}
	}
	return nil, false
}

// shardLeaders returns shard id -> leader node id as the running replicas
// agree, or an error naming the first shard without an agreed leader.
func (tc *testCluster) shardLeaders() (map[uint32]string, error) {
	out := map[uint32]string{}
	for _, n := range tc.nodes {
		for id := range n.ShardCount() {
			s := n.LocalShard(id)
			if s == nil {
				continue
			}
			l, _ := s.Leader()
			if l == "" {
				return nil, fmt.Errorf("shard %d on %s sees no leader", id, n.NodeID())
			}
			if prev, ok := out[id]; ok && prev != string(l) {
				return nil, fmt.Errorf("shard %d: leaders %s and %s", id, prev, l)
			}
			if _, running := tc.nodes[string(l)]; !running {
				return nil, fmt.Errorf("shard %d: leader %s is stopped", id, l)
			}
			out[id] = string(l)
		}
	}
	return out, nil
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill stops a node the way a crash would, as far as its peers can tell: raft
// stops without a leadership transfer and gossip without a leave.
func (tc *testCluster) kill(id string) {
	tc.t.Helper()
	n := tc.nodes[id]
	delete(tc.nodes, id)
	tc.liveMu.Lock()
	delete(tc.live, id)
	tc.liveMu.Unlock()
	n.shutdownOnce.Do(func() {
		n.cancel()
		n.wg.Wait()
		for _, s := range n.LocalShards() {
			_ = s.Raft().Shutdown().Error()
		}
		_ = n.meta.Raft().Shutdown().Error()
		ctx := context.Background()
		_ = n.shards.shutdownAll(ctx)
		_ = n.meta.Shutdown(ctx)
		_ = n.gossip.ml.Shutdown()
		_ = n.mux.Close()
	})
}

// testPeers answers a node's identity and repair calls from the other
// nodes of the test cluster in-process, as their Node gRPC service would.
type testPeers struct{ tc *testCluster }

func (p testPeers) node(id string) (*Node, error) {
	p.tc.liveMu.Lock()
	defer p.tc.liveMu.Unlock()
	n, ok := p.tc.live[id]
	if !ok {
		return nil, fmt.Errorf("node %s is not running", id)
	}
	return n, nil
}

func (p testPeers) Known(ctx context.Context, to Member, req *peerpb.KnownRequest) (*peerpb.KnownResponse, error) {
	n, err := p.node(to.NodeID)
	if err != nil {
		return nil, err
	}
	return n.Known(req.GetNodeId()), nil
}

func (p testPeers) GroupChange(ctx context.Context, to Member, req *peerpb.GroupChangeRequest) (*peerpb.GroupChangeResponse, string, error) {
	n, err := p.node(to.NodeID)
	if err != nil {
		return nil, "", err
	}
	last, err := n.ChangeGroup(ctx, req.GetGroup(), req.GetOp(), req.GetNodeId(), req.GetRaftAddr())
	if err != nil {
		var nl *raftgroup.NotLeaderError
		if errors.As(err, &nl) {
			return nil, nl.LeaderID, err
		}
		return nil, "", err
	}
	p.tc.changesMu.Lock()
	p.tc.changes = append(p.tc.changes, fmt.Sprintf("%s %s %s", req.GetGroup(), req.GetOp(), req.GetNodeId()))
	p.tc.changesMu.Unlock()
	return &peerpb.GroupChangeResponse{LeaderId: to.NodeID, LeaderLastIndex: last}, "", nil
}

func (p testPeers) ShardDigest(ctx context.Context, to Member, req *peerpb.ShardDigestRequest) (*peerpb.ShardDigestResponse, error) {
	n, err := p.node(to.NodeID)
	if err != nil {
		return nil, err
	}
	return n.ShardDigest(ctx, req)
}

func (p testPeers) ReplicaStatus(ctx context.Context, to Member, req *peerpb.ReplicaStatusRequest) (*peerpb.ReplicaStatusResponse, error) {
	n, err := p.node(to.NodeID)
	if err != nil {
		return nil, err
	}
	return n.ReplicaStatus(req.GetGroup())
}

// BackupPiece is not served in-process: backups are tested with real
// nodes (systest).
func (testPeers) BackupPiece(context.Context, Member, *peerpb.BackupPieceRequest) (*peer.PieceStream, error) {
	return nil, errors.New("testPeers: BackupPiece is not served in-process")
}

func (testPeers) Close() {}
