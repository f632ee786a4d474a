// Package nodes runs raftq-node processes inside the namespaces of a
// netns.Net and gives the nemesis its levers: kill -9, SIGTERM, SIGSTOP and
// SIGCONT, restart with a clock offset, new nodes joined in spare slots and
// the cluster's membership commands (membership.go). It also talks to the nodes'
// Cluster service to find shard leaders.
package nodes

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/jepsen-lite/netns"
	"github.com/raftq/raftq/tlsconf"
)

// Ports every node uses on its own address.
const (
	GRPCPort   = 7101
	RaftPort   = 7201
	GossipPort = 7301
	PeerPort   = 7501
)

// MaxClockOffset is every node's --max-clock-offset (the nodes' default,
// docs/clock.md), passed explicitly because the lease checker
// holds leases to it: in real time a lease keeps its length within twice
// it.
const MaxClockOffset = 500 * time.Millisecond

// Node is one raftq-node process slot (the process may be down).
type Node struct {
	ID, NS, IP, Dir, Log string
	GRPC, Peer           string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	paused bool
	offset time.Duration
	// repair: start with --repair (set once the node's files were
	// damaged; damage.go).
	repair bool
	// spare: the slot holds no cluster member (never started, or its
	// last node was retired); Join gives it a fresh node id.
	spare bool
	// joiner: the node joined a running cluster (--bootstrap-expect 0);
	// it was never one of the bootstrap voters.
	joiner bool
}

// Cluster is the set of node slots of one run: the first Initial are the
// bootstrap members, the rest spares the membership nemesis starts as
// new nodes (membership.go).
type Cluster struct {
	Bin     string
	Shards  int
	Nodes   []*Node
	Initial int
	dir     string
	// lastID numbers node ids: every node ever started has its own
	// ("n1".."n<Initial>", then one more per Join), because a retired id
	// is refused for good. Only Join (the nemesis's goroutine) changes it.
	lastID int
	join   string
	conns  []*grpc.ClientConn
	// peerConns reach the nodes' peer ports (replica digests, Known).
	peerConns []*grpc.ClientConn
	// certs is the run's CA, gossip key and node certificates: every
	// run is under TLS and encrypted gossip (docs/security.md).
	certs *tlsconf.Dir
	// creds are what a client of the run dials the nodes with.
	creds credentials.TransportCredentials
}

// New lays out one node slot per namespace; data and logs go under dir.
// The first initial slots are the bootstrap members; the rest are spares.
func New(bin, dir string, nw *netns.Net, shards, initial int) (*Cluster, error) {
	if initial < 1 || initial > len(nw.Nodes) {
		return nil, fmt.Errorf("%d initial nodes of %d slots", initial, len(nw.Nodes))
	}
	c := &Cluster{Bin: bin, Shards: shards, Initial: initial, dir: dir, lastID: initial}
	creds, member, err := c.initCerts()
	if err != nil {
		return nil, err
	}
	c.creds = creds
	var gossip []string
	for i, ns := range nw.Nodes {
		n := &Node{
			NS: ns.Name, IP: ns.IP,
			GRPC: fmt.Sprintf("%s:%d", ns.IP, GRPCPort),
			Peer: fmt.Sprintf("%s:%d", ns.IP, PeerPort),
		}
		if i < initial {
			c.name(n, "n"+strconv.Itoa(i+1))
		} else {
			n.spare = true
		}
		gossip = append(gossip, fmt.Sprintf("%s:%d", ns.IP, GossipPort))
		c.Nodes = append(c.Nodes, n)
		cc, err := grpc.NewClient(n.GRPC, grpc.WithTransportCredentials(creds))
		if err != nil {
			return nil, fmt.Errorf("dial %s: %w", n.GRPC, err)
		}
		c.conns = append(c.conns, cc)
		pc, err := grpc.NewClient(n.Peer, grpc.WithTransportCredentials(member))
		if err != nil {
			return nil, fmt.Errorf("dial %s: %w", n.Peer, err)
		}
		c.peerConns = append(c.peerConns, pc)
	}
	// Every slot's gossip address, spares too: a join needs one live
	// member among them, and slots change hands.
	c.join = strings.Join(gossip, ",")
	return c, nil
}

// name gives node slot n the node id and the data directory and log that
// go with it.
func (c *Cluster) name(n *Node, id string) {
	n.ID, n.Dir, n.Log = id, filepath.Join(c.dir, id), filepath.Join(c.dir, id+".log")
}

// Conn is the shared client connection to node i.
func (c *Cluster) Conn(i int) *grpc.ClientConn { return c.conns[i] }

// PeerConn is the shared connection to node i's peer port.
func (c *Cluster) PeerConn(i int) *grpc.ClientConn { return c.peerConns[i] }

// Start launches node i with the given clock offset. The process is
// `ip netns exec`, which execs the node in place, so its pid is the node's.
func (c *Cluster) Start(i int, offset time.Duration) error {
	n := c.Nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil && !closed(n.done) {
		return fmt.Errorf("node %s is still running", n.ID)
	}
	if n.spare {
		return fmt.Errorf("slot %d is a spare: Join starts it", i)
	}
	logf, err := os.OpenFile(n.Log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("open log: %w", err)
	}
	fmt.Fprintf(logf, "=== jepsen-lite: start %s clock-offset %v repair %v at %s\n", n.ID, offset, n.repair, time.Now().Format(time.RFC3339Nano))
	expect := c.Initial
	if n.joiner {
		expect = 0
	}
	args := []string{"netns", "exec", n.NS, c.Bin,
		"--node-id", n.ID, "--data-dir", n.Dir,
		"--grpc-bind", n.GRPC, "--peer-bind", n.Peer,
		"--raft-bind", fmt.Sprintf("%s:%d", n.IP, RaftPort),
		"--gossip-bind", fmt.Sprintf("%s:%d", n.IP, GossipPort),
		"--http-bind", "",
		"--join", c.join, "--bootstrap-expect", strconv.Itoa(expect),
		"--shards", strconv.Itoa(c.Shards), "--replication", strconv.Itoa(min(3, c.Initial)),
		"--shutdown-timeout", "10s", "--clock-offset", offset.String(),
		"--max-clock-offset", MaxClockOffset.String(),
	}
	if n.repair {
		args = append(args, "--repair")
	}
	sec, err := c.nodeTLS(n)
	if err != nil {
		_ = logf.Close()
		return err
	}
	args = append(args, sec...)
	cmd := exec.Command("ip", args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own process group: a ^C to the harness must not kill nodes before the
	// harness's own cleanup runs (it kills them itself).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("start %s: %w", n.ID, err)
	}
	done := make(chan struct{})
	n.cmd, n.done, n.paused, n.offset = cmd, done, false, offset
	go func() {
		_ = cmd.Wait()
		_ = logf.Close()
		close(done)
	}()
	return nil
}

func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Running reports whether node i's process is alive (paused counts).
func (c *Cluster) Running(i int) bool {
	n := c.Nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd != nil && !closed(n.done)
}

// Offset is the clock offset node i was started with.
func (c *Cluster) Offset(i int) time.Duration {
	n := c.Nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.offset
}

func (c *Cluster) signal(i int, sig syscall.Signal) error {
	n := c.Nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || closed(n.done) {
		return fmt.Errorf("node %s is not running", n.ID)
	}
	if err := n.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %v to %s: %w", sig, n.ID, err)
	}
	switch sig {
	case syscall.SIGSTOP:
		n.paused = true
	case syscall.SIGCONT:
		n.paused = false
	}
	return nil
}

// Kill sends SIGKILL (after SIGCONT, so a paused node dies too) and waits.
func (c *Cluster) Kill(ctx context.Context, i int) error {
	_ = c.signal(i, syscall.SIGCONT)
	if err := c.signal(i, syscall.SIGKILL); err != nil {
		return err
	}
	return c.wait(ctx, i)
}

// Stop sends SIGTERM and waits for a graceful exit, then kills.
func (c *Cluster) Stop(ctx context.Context, i int) error {
	if err := c.signal(i, syscall.SIGTERM); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := c.wait(wctx, i); err != nil {
		return c.Kill(ctx, i)
	}
	return nil
}

func (c *Cluster) wait(ctx context.Context, i int) error {
	n := c.Nodes[i]
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for %s to exit: %w", n.ID, ctx.Err())
	}
}

// Pause and Resume freeze and thaw node i (SIGSTOP/SIGCONT).
func (c *Cluster) Pause(i int) error  { return c.signal(i, syscall.SIGSTOP) }
func (c *Cluster) Resume(i int) error { return c.signal(i, syscall.SIGCONT) }

// KillAll kills every running node; used at exit.
func (c *Cluster) KillAll(ctx context.Context) {
	for i := range c.Nodes {
		if c.Running(i) {
			_ = c.Kill(ctx, i)
		}
	}
	for _, cc := range append(c.conns, c.peerConns...) {
		_ = cc.Close()
	}
}

// WaitServing polls node i's gRPC health until SERVING.
func (c *Cluster) WaitServing(ctx context.Context, i int) error {
	hc := healthpb.NewHealthClient(c.conns[i])
	var last error
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := hc.Check(cctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		last = err
		if !c.Running(i) {
			return fmt.Errorf("node %s exited (see %s)", c.Nodes[i].ID, c.Nodes[i].Log)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s not serving: %w (last: %v)", c.Nodes[i].ID, ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Status asks node i for its view of the cluster.
func (c *Cluster) Status(ctx context.Context, i int) (*raftqv1.StatusResponse, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := raftqv1.NewClusterClient(c.conns[i]).Status(cctx, &raftqv1.StatusRequest{})
	if err != nil {
		return nil, fmt.Errorf("status of %s: %w", c.Nodes[i].ID, err)
	}
	return st, nil
}

// Index maps a node id ("n2") to the slot of the member that has it, or
// -1 (a retired id has no slot).
func (c *Cluster) Index(id string) int {
	for i, n := range c.Nodes {
		if n.ID == id && !c.isSpare(i) {
			return i
		}
	}
	return -1
}

// Leaders asks running nodes for shard leaders: shard -> node slot. Nodes
// may disagree during faults; the first answer per shard wins.
func (c *Cluster) Leaders(ctx context.Context) map[uint32]int {
	out := map[uint32]int{}
	for _, i := range c.Members() {
		if !c.Running(i) {
			continue
		}
		st, err := c.Status(ctx, i)
		if err != nil {
			continue
		}
		for _, s := range st.GetShards() {
			if _, ok := out[s.GetShardId()]; !ok && s.GetLeaderId() != "" {
				if j := c.Index(s.GetLeaderId()); j >= 0 {
					out[s.GetShardId()] = j
				}
			}
		}
	}
	return out
}

// WaitHealthy waits until every member serves and every shard has a
// leader that all its replicas agree on.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	for _, i := range c.Members() {
		if err := c.WaitServing(ctx, i); err != nil {
			return err
		}
	}
	var last error
	for {
		last = c.agree(ctx)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not healthy: %w (last: %v)", ctx.Err(), last)
		case <-time.After(300 * time.Millisecond):
		}
	}
}

func (c *Cluster) agree(ctx context.Context) error {
	leader := map[uint32]string{}
	known, knower := 0, ""
	for _, i := range c.Members() {
		st, err := c.Status(ctx, i)
		if err != nil {
			return err
		}
		// The count only grows (the reshard nemesis): at least the
		// start's, and the same on every member once healthy.
		if k := len(st.GetShards()); k < c.Shards {
			return fmt.Errorf("%s knows %d shards of %d", c.Nodes[i].ID, k, c.Shards)
		} else if known == 0 {
			known, knower = k, c.Nodes[i].ID
		} else if k != known {
			return fmt.Errorf("%s knows %d shards, %s %d", c.Nodes[i].ID, k, knower, known)
		}
		for _, s := range st.GetShards() {
			// A node that hosts no replica of the shard learns its leader
			// only from forwarding hints, so only replicas must name one.
			if !slices.Contains(s.GetReplicas(), c.Nodes[i].ID) {
				continue
			}
			id := s.GetLeaderId()
			if id == "" {
				return fmt.Errorf("%s: shard %d has no leader", c.Nodes[i].ID, s.GetShardId())
			}
			if prev, ok := leader[s.GetShardId()]; ok && prev != id {
				return fmt.Errorf("shard %d: leaders %s and %s", s.GetShardId(), prev, id)
			}
			leader[s.GetShardId()] = id
		}
	}
	return nil
}
