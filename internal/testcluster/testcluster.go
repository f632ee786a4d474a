// Package testcluster starts real raftq-node processes on loopback for
// integration tests, benchmarks and jepsen-lite: real TCP, real bolt files,
// real signals (kill -9, SIGTERM, SIGSTOP).
package testcluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Build compiles cmd/node into dir and returns the binary's path. Tests
// call it once from TestMain.
func Build(ctx context.Context, dir string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "raftq-node")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/node")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/node: %w\n%s", err, out)
	}
	return bin, nil
}

// BuildCLI compiles cmd/raftq (the operator CLI) into dir and returns the
// binary's path, for tests that drive a cluster the way an operator does.
func BuildCLI(ctx context.Context, dir string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "raftq")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/raftq")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/raftq: %w\n%s", err, out)
	}
	return bin, nil
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("getwd: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// Options shape a cluster.
type Options struct {
	Nodes  int      // default 3
	Shards int      // default 4 (fewer groups keep tests light on 2 cores)
	Args   []string // extra flags for every node
	// NodeArgs[i] are extra flags for node i only (after Args, so they
	// win), e.g. --clock-offset; they become its ExtraArgs, which later
	// restarts keep unless the test changes them.
	NodeArgs [][]string
	// IDPrefix names the nodes IDPrefix1, IDPrefix2, ... (default "n"),
	// so a second cluster in one test can have ids of its own.
	IDPrefix string
	// DataDirs, if set, is node i's data directory (a filesystem the test
	// prepared, say); default a directory under the test's temp dir.
	DataDirs []string
	// TLS runs the cluster with TLS and gossip encryption from a CA of
	// its own (tls.go); default --insecure. Either is passed through the
	// environment (RAFTQ_INSECURE, RAFTQ_TLS_*), which binaries from
	// before the flags existed ignore (the rolling upgrade test).
	TLS bool
}

// Node is one raftq-node process.
type Node struct {
	ID, Dir, GRPC, Peer, Raft, Gossip, HTTP string
	LogPath                                 string
	ExtraArgs                               []string
	// Joiner: added after the cluster formed (AddNode); it starts with
	// --bootstrap-expect 0 and joins through the others.
	Joiner bool
	// Bin, if set, is the raftq-node binary this node runs from its next
	// start on, instead of the cluster's: a rolling upgrade sets it node by
	// node.
	Bin string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Cluster is a set of nodes started by this process.
type Cluster struct {
	t     testing.TB
	bin   string
	opts  Options
	Nodes []*Node
	join  string
	name  string

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
	pki   *pki // nil without Options.TLS
}

// Start launches the nodes and waits until every node reports SERVING.
// Nodes are killed when the test ends.
func Start(t testing.TB, bin string, opts Options) *Cluster {
	t.Helper()
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	if opts.Shards == 0 {
		opts.Shards = 4
	}
	if opts.IDPrefix == "" {
		opts.IDPrefix = "n"
	}
	c := &Cluster{t: t, bin: bin, opts: opts, conns: map[string]*grpc.ClientConn{}}
	dir := t.TempDir()
	var gossip []string
	// One call for every node's ports: the listeners of one call are open
	// together, so its ports are distinct; ports from separate calls are
	// not (the kernel can hand a just-closed port out again), and two nodes
	// sharing one failed a test run.
	all := freePorts(t, 5*opts.Nodes)
	for i := 1; i <= opts.Nodes; i++ {
		ports := all[5*(i-1) : 5*i]
		n := &Node{
			ID:     opts.IDPrefix + strconv.Itoa(i),
			Dir:    nodeDir(opts, dir, i),
			GRPC:   "127.0.0.1:" + ports[0],
			Raft:   "127.0.0.1:" + ports[1],
			Gossip: "127.0.0.1:" + ports[2],
			HTTP:   "127.0.0.1:" + ports[3],
			Peer:   "127.0.0.1:" + ports[4],
		}
		n.LogPath = filepath.Join(dir, n.ID+".log")
		if i-1 < len(opts.NodeArgs) {
			n.ExtraArgs = append([]string(nil), opts.NodeArgs[i-1]...)
		}
		gossip = append(gossip, n.Gossip)
		c.Nodes = append(c.Nodes, n)
	}
	c.join = strings.Join(gossip, ",")
	// A name of its own, so no other test's cluster that still gossips to
	// a port this one reuses can pull these nodes in.
	c.name = fmt.Sprintf("test-%d-%d", os.Getpid(), rand.Uint64())
	if opts.TLS {
		c.pki = newPKI(t, filepath.Join(dir, "certs"))
	}
	t.Cleanup(c.killAll)
	for i := range c.Nodes {
		c.Restart(i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range c.Nodes {
		if err := c.WaitServing(ctx, i); err != nil {
			c.DumpLogs()
			t.Fatalf("node %s never became healthy: %v", c.Nodes[i].ID, err)
		}
	}
	return c
}

// AddNode starts one more node, n<len+1>, with --bootstrap-expect 0 and
// --join naming the first nodes, waits until it serves, and returns its
// index. It becomes a member (a meta nonvoter) holding no replica until
// one is moved to it.
func (c *Cluster) AddNode() int {
	c.t.Helper()
	i := len(c.Nodes)
	ports := freePorts(c.t, 5)
	dir := filepath.Dir(c.Nodes[0].LogPath)
	n := &Node{
		ID:     c.opts.IDPrefix + strconv.Itoa(i+1),
		Dir:    filepath.Join(dir, c.opts.IDPrefix+strconv.Itoa(i+1)+"-data"),
		GRPC:   "127.0.0.1:" + ports[0],
		Raft:   "127.0.0.1:" + ports[1],
		Gossip: "127.0.0.1:" + ports[2],
		HTTP:   "127.0.0.1:" + ports[3],
		Peer:   "127.0.0.1:" + ports[4],
		Joiner: true,
	}
	n.LogPath = filepath.Join(dir, n.ID+".log")
	c.Nodes = append(c.Nodes, n)
	c.Restart(i)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.WaitServing(ctx, i); err != nil {
		c.DumpLogs()
		c.t.Fatalf("added node %s never became healthy: %v", n.ID, err)
	}
	return i
}

// SetBin makes bin the binary of every node without one of its own
// (Node.Bin) from its next start, and of nodes added from now on: once a
// rolling upgrade is done, the cluster's binary is the new one.
func (c *Cluster) SetBin(bin string) {
	c.t.Helper()
	c.bin = bin
}

// nodeDir is the data directory of node i (1-based).
func nodeDir(opts Options, tmp string, i int) string {
	if i-1 < len(opts.DataDirs) && opts.DataDirs[i-1] != "" {
		return opts.DataDirs[i-1]
	}
	return filepath.Join(tmp, opts.IDPrefix+strconv.Itoa(i))
}

// Restart starts node i (again) with its data dir.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.RestartArgs(i)
}

// RestartArgs starts node i (again) with its data dir and, for this start
// only, the extra flags args (e.g. --repair).
func (c *Cluster) RestartArgs(i int, extra ...string) {
	c.t.Helper()
	n := c.Nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil && !isDone(n.done) {
		c.t.Fatalf("node %s is still running", n.ID)
	}
	logf, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		c.t.Fatalf("open log: %v", err)
	}
	expect := c.opts.Nodes
	if n.Joiner {
		expect = 0
	}
	args := []string{
		"--node-id", n.ID, "--data-dir", n.Dir,
		"--grpc-bind", n.GRPC, "--peer-bind", n.Peer, "--raft-bind", n.Raft, "--gossip-bind", n.Gossip, "--http-bind", n.HTTP,
		"--join", c.join, "--cluster-name", c.name, "--bootstrap-expect", strconv.Itoa(expect), "--shards", strconv.Itoa(c.opts.Shards),
		"--replication", strconv.Itoa(min(3, c.opts.Nodes)), "--shutdown-timeout", "10s",
	}
	args = append(args, c.opts.Args...)
	args = append(args, n.ExtraArgs...)
	args = append(args, extra...)
	bin := c.bin
	if n.Bin != "" {
		bin = n.Bin
	}
	fmt.Fprintf(logf, "=== testcluster: start %s %s at %s (%s)\n", n.ID, strings.Join(extra, " "), time.Now().Format(time.RFC3339Nano), bin)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), c.securityEnv(n.ID)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		c.t.Fatalf("start %s: %v", n.ID, err)
	}
	n.cmd, n.done = cmd, make(chan struct{})
	go func(done chan struct{}) {
		err := cmd.Wait()
		_ = logf.Close()
		n.mu.Lock()
		n.err = err
		n.mu.Unlock()
		close(done)
	}(n.done)
}

func isDone(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Exited is closed when node i's current process has exited; ExitErr then
// says how (nil: exit status 0).
func (c *Cluster) Exited(i int) <-chan struct{} {
	n := c.Nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.done == nil {
		c.t.Fatalf("node %s not started", n.ID)
	}
	return n.done
}

// ExitErr is how node i's last process exited (nil: status 0, or still
// running).
func (c *Cluster) ExitErr(i int) error {
	n := c.Nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.err
}

// Signal sends sig to node i's process.
func (c *Cluster) Signal(i int, sig syscall.Signal) {
	c.t.Helper()
	n := c.Nodes[i]
	n.mu.Lock()
	cmd := n.cmd
	n.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		c.t.Fatalf("node %s not started", n.ID)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		c.t.Fatalf("signal %v to %s: %v", sig, n.ID, err)
	}
}

// Kill sends SIGKILL to node i and waits for it to die.
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	c.Signal(i, syscall.SIGKILL)
	<-c.Nodes[i].done
}

// KillEvery sends SIGKILL to every running node before waiting for any of
// them to die, so they all go down within microseconds of each other: no
// node outlives the others long enough to replicate or fsync more.
func (c *Cluster) KillEvery() {
	c.t.Helper()
	var dying []chan struct{}
	for i := range c.Nodes {
		if c.Running(i) {
			c.Signal(i, syscall.SIGKILL)
			dying = append(dying, c.Nodes[i].done)
		}
	}
	for _, done := range dying {
		<-done
	}
}

// Stop sends SIGTERM and returns the process's exit error (nil = exit 0).
func (c *Cluster) Stop(i int, timeout time.Duration) error {
	c.t.Helper()
	c.Signal(i, syscall.SIGTERM)
	select {
	case <-c.Nodes[i].done:
		n := c.Nodes[i]
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.err
	case <-time.After(timeout):
		return fmt.Errorf("node %s did not exit within %v of SIGTERM", c.Nodes[i].ID, timeout)
	}
}

// WaitExit waits up to d for node i's process to exit on its own and
// returns its exit error (nil: exit 0); exited is false if it still runs.
func (c *Cluster) WaitExit(i int, d time.Duration) (exited bool, err error) {
	n := c.Nodes[i]
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	select {
	case <-done:
		n.mu.Lock()
		defer n.mu.Unlock()
		return true, n.err
	case <-time.After(d):
		return false, nil
	}
}

// PID is node i's current process id (0 before it started).
func (c *Cluster) PID(i int) int {
	n := c.Nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.cmd.Process == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

// Running reports whether node i's process is alive.
func (c *Cluster) Running(i int) bool {
	n := c.Nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd != nil && !isDone(n.done)
}

func (c *Cluster) killAll() {
	for _, n := range c.Nodes {
		n.mu.Lock()
		cmd, done := n.cmd, n.done
		n.mu.Unlock()
		if cmd != nil && !isDone(done) {
			_ = cmd.Process.Signal(syscall.SIGCONT) // a paused node cannot die otherwise
			_ = cmd.Process.Kill()
			<-done
		}
	}
	c.mu.Lock()
	for _, cc := range c.conns {
		_ = cc.Close()
	}
	c.mu.Unlock()
	if c.t.Failed() {
		c.DumpLogs()
	}
}

// DumpLogs prints the tail of every node's log into the test output.
func (c *Cluster) DumpLogs() {
	for _, n := range c.Nodes {
		b, err := os.ReadFile(n.LogPath)
		if err != nil {
			continue
		}
		if len(b) > 6000 {
			b = b[len(b)-6000:]
		}
		c.t.Logf("---- %s log (tail) ----\n%s", n.ID, b)
	}
}

// Conn returns a shared client connection to node i's gRPC port.
func (c *Cluster) Conn(i int) *grpc.ClientConn {
	c.t.Helper()
	return c.dial(c.Nodes[i].GRPC)
}

// PeerConn returns a shared connection to node i's peer port
// (peer/peerpb), where the node-to-node service is served.
func (c *Cluster) PeerConn(i int) *grpc.ClientConn {
	c.t.Helper()
	return c.dial(c.Nodes[i].Peer)
}

func (c *Cluster) dial(addr string) *grpc.ClientConn {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc, ok := c.conns[addr]; ok {
		return cc
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(c.MemberCreds()))
	if err != nil {
		c.t.Fatalf("dial %s: %v", addr, err)
	}
	c.conns[addr] = cc
	return cc
}

// Name is the cluster's --cluster-name (its gossip label).
func (c *Cluster) Name() string { return c.name }

// Addrs lists every node's gRPC address.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.GRPC
	}
	return out
}

// WaitServing polls node i's gRPC health until SERVING or ctx ends.
func (c *Cluster) WaitServing(ctx context.Context, i int) error {
	hc := healthpb.NewHealthClient(c.Conn(i))
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := hc.Check(cctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		if !c.Running(i) {
			return fmt.Errorf("node %s exited", c.Nodes[i].ID)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
